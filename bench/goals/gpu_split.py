"""GPU layers while the experts stream (issue #35): dense on the GPU, routed experts in host memory.

One MoE file, one budget, five expert runs (the same ExpertRun the CLI's ``bench`` uses,
``streams="experts"`` so that every run keeps the experts in host memory):

- ``cpu stream``: n_gpu_layers 0 at ``--budget-mb`` (experts stream, everything computes on the CPU);
- ``gpu stream``: ``--gpu-layers`` (default 99: every layer and the output head) at the same budget;
- ``gpu resident``: the same split with a budget that holds every expert (the bound: no reads);
- ``cpu resident``: n_gpu_layers 0, every expert resident (for the CPU's own bound);
- ``gpu micro``: the GPU split at the minimum budget, below one layer's expert bank, with a long
  prompt: the prompt must still run in micro-batches, as on the CPU.

Each run does ``--rounds`` rounds of ``--tokens`` greedy tokens on one load (the cache stays as the
last round left it) and the last round is reported: tok/s, TTFT, MB read per token (the kernel's
read_bytes), host weights resident (peak, sampled), GPU memory in use, the expert hit rate and the
GPU's share of compute. Then the ratios the issue asks for are printed:

- gpu stream ÷ gpu resident tok/s (goal ≥ 0.8 where the hit rate is ≥ 95 %);
- gpu stream ÷ cpu stream tok/s;
- MB read per token, gpu stream vs cpu stream (goal: within 5 %);
- greedy tokens of gpu stream = gpu resident (same split) for the first ≥ 16 tokens.

GPU arithmetic differs from the CPU's, so texts are compared GPU run to GPU run (a random
synthetic model's near-ties flip; docs/gpu.md). The host-memory bound is checked from another
process by ``shardscope bench --verify`` (docs/benchmarks.md gives that command); this script's
resident figure is the run's own sampler.

    python -m bench.goals.gpu_split --model /tmp/moe24.gguf --budget-mb 1700 --threads 8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from shardscope.engine.knobs.settings import RunSettings  # noqa: E402
from shardscope.engine.layout import budget_minimum as bm  # noqa: E402
from shardscope.engine.layout.gguf_layout import read_layout  # noqa: E402
from shardscope.engine.layout.moe_layout import read_moe_layout  # noqa: E402
from shardscope.engine.runs.run_factory import open_run  # noqa: E402

MIB = 1024 * 1024
LONG_PROMPT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
               "combined movable metal type, oil-based ink and a wooden screw press into a system that could "
               "print books faster than any scribe. ")
FIELDS = ("n_gpu_layers", "budget_mb", "avg_ts", "ttft_ms", "read_mb_per_token", "resident_weights_mb", "gpu_mb",
          "expert_hit_rate", "compute_ms_per_token", "gpu_compute_ms_per_token", "expert_wait_ms_per_token",
          "n_prompt", "prompt_batch_tokens", "peak_rss_mb")


def one(label: str, model: str, *, n_gpu_layers: int, budget_mb: float, args, prompt: str | None = None) -> dict:
    settings = RunSettings(model_path=model, budget_mb=budget_mb, n_gpu_layers=n_gpu_layers, threads=args.threads,
                           n_gen=args.tokens, n_ctx=max(args.n_ctx, 512) if prompt else args.n_ctx,
                           **({"prompt": prompt} if prompt else {}))
    t0 = time.perf_counter()
    rounds = []
    with open_run(settings, streams="experts") as run:
        for _ in range(args.rounds):
            summary = run.run()
            rounds.append({k: getattr(summary, k) for k in FIELDS})
            rounds[-1]["tokens"] = list(run.tokens)
    row = dict(rounds[-1], label=label, first_round=rounds[0], wall_s=round(time.perf_counter() - t0, 1))
    print(f"{label:13s} ngl {row['n_gpu_layers']:3d}  budget {budget_mb:7.0f} MiB  {row['avg_ts']:8.2f} tok/s  "
          f"TTFT {row['ttft_ms']:8.1f} ms  read {row['read_mb_per_token']:7.2f} MiB/tok  "
          f"host weights {row['resident_weights_mb']:7.1f} MiB  GPU {row['gpu_mb']:7.1f} MiB  "
          f"hit {100 * row['expert_hit_rate']:5.1f} %  compute {row['compute_ms_per_token']:.2f} ms "
          f"(GPU {row['gpu_compute_ms_per_token']:.2f}), expert wait {row['expert_wait_ms_per_token']:.2f} ms/tok  "
          f"prompt {row['n_prompt']} in batches of {row['prompt_batch_tokens']}  (round 1: "
          f"{rounds[0]['avg_ts']:.2f} tok/s, read {rounds[0]['read_mb_per_token']:.2f} MiB/tok)", flush=True)
    return row


def _same_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens two greedy runs share before the first difference."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--budget-mb", type=float, required=True, help="the streamed runs' budget")
    ap.add_argument("--gpu-layers", type=int, default=99)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=256)
    ap.add_argument("--skip", default="", help="labels to leave out, comma-separated")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    moe = read_moe_layout(read_layout(args.model))
    size_mb = Path(args.model).stat().st_size / MIB
    bank_mb = max(moe.unit_bytes(layer) for layer in moe.layers) * moe.n_expert / MIB
    tiny = bm.min_budget_mb(moe, False)
    print(f"model {args.model}: {size_mb:.0f} MiB, {len(moe.layers)} MoE layers, {moe.n_expert} experts top-"
          f"{moe.n_expert_used}, dense {moe.dense_bytes / MIB:.0f} MiB, one layer's bank {bank_mb:.0f} MiB; "
          f"minimum budget {tiny} MiB", flush=True)
    skip = set(filter(None, args.skip.split(",")))
    plan = [("cpu stream", 0, args.budget_mb, None), ("gpu stream", args.gpu_layers, args.budget_mb, None),
            ("gpu resident", args.gpu_layers, size_mb + 256, None), ("cpu resident", 0, size_mb + 256, None),
            ("gpu micro", args.gpu_layers, tiny, LONG_PROMPT)]
    rows = {}
    for label, ngl, budget, prompt in plan:
        if label in skip:
            continue
        try:
            rows[label] = one(label, args.model, n_gpu_layers=ngl, budget_mb=budget, args=args, prompt=prompt)
        except Exception as exc:  # one failed run must not lose the others' figures
            print(f"{label}: FAILED {type(exc).__name__}: {exc}", flush=True)
    g, r, c = rows.get("gpu stream"), rows.get("gpu resident"), rows.get("cpu stream")
    if g and r:
        same = _same_prefix(g["tokens"], r["tokens"])
        print(f"gpu stream / gpu resident tok/s = {_ratio(g['avg_ts'], r['avg_ts']):.3f} "
              f"(hit rate {100 * g['expert_hit_rate']:.1f} %; goal >= 0.8 at >= 95 %)")
        print(f"greedy tokens gpu stream = gpu resident for {same} of {len(g['tokens'])} "
              f"({'identical' if same == len(g['tokens']) else 'DIFFER'}; goal >= 16)")
    if g and c:
        print(f"gpu stream / cpu stream tok/s = {_ratio(g['avg_ts'], c['avg_ts']):.3f}; TTFT "
              f"{_ratio(g['ttft_ms'], c['ttft_ms']):.3f}")
        for name, gr, cr in (("last round", g, c), ("round 1", g["first_round"], c["first_round"])):
            print(f"read MiB/token ({name}) gpu stream {gr['read_mb_per_token']:.3f} vs cpu stream "
                  f"{cr['read_mb_per_token']:.3f}: "
                  f"{100 * (_ratio(gr['read_mb_per_token'], cr['read_mb_per_token']) - 1):+.1f} %"
                  f" (goal within 5 %)")
        same = _same_prefix(g["tokens"], c["tokens"])
        print(f"greedy tokens gpu stream = cpu stream for the first {same} of {len(g['tokens'])} (GPU arithmetic: "
              f"a different token routes differently, so reads compare only while the texts agree)")
        print(f"host weights resident: gpu stream {g['resident_weights_mb']:.0f} MiB, cpu stream "
              f"{c['resident_weights_mb']:.0f} MiB, budget {args.budget_mb:.0f} MiB")
    cr = rows.get("cpu resident")
    if r and cr:
        print(f"gpu resident / cpu resident tok/s = {_ratio(r['avg_ts'], cr['avg_ts']):.3f}")
    m = rows.get("gpu micro")
    if m:
        ok = 0 < m["prompt_batch_tokens"] < m["n_prompt"]
        print(f"gpu micro: prompt of {m['n_prompt']} tokens in batches of {m['prompt_batch_tokens']} at "
              f"{tiny} MiB (one layer's bank {bank_mb:.0f} MiB): {'micro-batched' if ok else 'NOT micro-batched'}, "
              f"{len(m['tokens'])} tokens, host weights {m['resident_weights_mb']:.0f} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
