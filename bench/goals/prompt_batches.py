"""What the prompt costs when one layer's experts exceed the budget: micro-batch size vs TTFT and reads.

Expert streaming decodes the prompt in micro-batches of m tokens, m = expert cache ÷ (k × one
expert), so that any layer's union of a batch's picks fits the cache (engine/layout/budget_minimum.py);
a cache that holds a layer's whole bank takes the prompt in one pass. The layer computing may use
the whole cache, so each picked expert is read once per batch that picks it: the reads grow as m
shrinks, and this script shows by how much.

On a Kimi-shaped model (``synth --moe --like kimi-k2 --size-mb 400``: deepseek2, 4 layers, 384
experts top-8, written once into the cache dir), for a 64-token prompt, one cold run per budget:
the minimum budget (m = 2), budgets giving m = 4 … 32, and the whole-bank budget (one pass). Per
run it prints

- TTFT, and TTFT ÷ the whole-bank prompt's TTFT;
- MB read during the prompt (the kernel's read_bytes, /proc/self/io) per prompt token;
- read ÷ distinct: MB read during the prompt ÷ the bytes of the distinct experts the prompt picked
  (the run's routing records: each layer's union over the prompt's batches × the expert's bytes).
  1.0 = every picked expert read exactly once. Goal: ≤ 2.0 at the minimum budget;
- whether the greedy tokens equal the unconstrained run's (all resident, no callback, the prompt
  in one llama_decode) and the peak weights resident (mincore, sampled) against the budget.

Runs take ~1-3 min in all on 2 cores; timings move with the machine's load, so compare ratios
within one run of the script.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout import budget_minimum as bm
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.runs.run_factory import open_run

MIB = 1024 * 1024
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg "
        "combined movable metal type, oil-based ink and a wooden screw press into a system that could "
        "print books faster than any scribe. Within fifty years presses spread to more than two hundred "
        "cities across Europe, and the price of books fell so far that reading became common. ") * 4


def model_path(size_mb: int) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import like_kimi_k2

    path = cache_dir() / "bench" / f"kimi-k2-shape-{size_mb}mb-4layers-routing-v2.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_synthetic_model(path, size_mb, n_layers=4, moe=like_kimi_k2(), seed=23)
    return str(path)


def prompt_of(path: str, n_tokens: int) -> str:
    """The longest run of TEXT's first characters that is ``n_tokens`` tokens (the BOS included)."""
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(path, n_threads=2, n_ctx=512) as session:
        lo, hi = 1, len(TEXT)
        while lo < hi:  # the most characters with at most n_tokens tokens
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if len(session.tokenize(TEXT[:mid])) <= n_tokens else (lo, mid - 1)
        text = TEXT[:lo]
        if len(session.tokenize(text)) != n_tokens:
            raise SystemExit(f"could not cut a {n_tokens}-token prompt from the text")
        return text


def reference_tokens(path: str, prompt: str, n_gen: int) -> list[int]:
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(path, n_threads=2, n_ctx=256) as session:  # all resident, no callback, one pass
        return session.generate(prompt, n_gen).tokens


def distinct_prompt_bytes(records, unit_bytes: dict[int, int]) -> int:
    picked: dict[int, set[int]] = {}
    for r in records:
        if r.prompt:
            picked.setdefault(r.layer, set()).update(r.experts)
    return sum(len(experts) * unit_bytes[layer] for layer, experts in picked.items())


def one_run(settings: RunSettings):
    from bench.lib.cold_cache import drop_from_cache

    drop_from_cache(settings.model_path)
    with open_run(settings) as run:
        summary = run.run()
        trace = run.routing_records()
        return summary, list(run.tokens), trace


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=400)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=8, help="tokens generated after the prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batches", default="2,4,8,16,32", help="micro-batch sizes to run (the first: the minimum)")
    args = ap.parse_args(argv)

    path = model_path(args.size_mb)
    moe = read_moe_layout(read_layout(path))
    unit, k = bm.booked_unit_bytes(moe), moe.n_expert_used
    dense = bm.resident_dense_bytes(moe)
    minimum = bm.min_budget_mb(moe, False)
    prompt = prompt_of(path, args.prompt_tokens)
    reference = reference_tokens(path, prompt, args.tokens)
    print(f"model: {Path(path).name}: {moe.total_bytes / MIB:.0f} MiB, {moe.architecture}, {len(moe.layers)} MoE "
          f"layers × {moe.n_expert} experts (top-{k}) of {unit / MIB:.3f} MiB; dense {dense / MIB:.1f} MiB; one "
          f"layer's bank {moe.n_expert * unit / MIB:.1f} MiB; minimum budget {minimum} MB; prompt "
          f"{args.prompt_tokens} tokens, {args.tokens} generated")

    # budget (MB) per micro-batch size: dense + m × k experts, the smallest whole MB giving that m
    plans = []
    for m in (int(x) for x in args.batches.split(",")):
        budget = math.ceil((dense + m * k * unit) / MIB)
        plans.append((f"m = {m}" + (" (minimum)" if budget <= minimum else ""), max(budget, minimum)))
    whole = math.ceil((dense + moe.n_expert * unit) / MIB)
    if whole * MIB < moe.total_bytes:  # the model must still stream at that budget
        plans.append(("whole bank, one pass", whole))

    rows = []
    for label, budget in plans:
        s = RunSettings(model_path=path, budget_mb=budget, n_gen=args.tokens, n_ctx=256, threads=args.threads,
                        prompt=prompt)
        summary, tokens, trace = one_run(s)
        distinct = distinct_prompt_bytes(trace.records, trace.header.unit_bytes)
        rows.append((label, budget, summary, tokens == reference, distinct))

    base_ttft = rows[-1][2].ttft_ms if rows[-1][0].startswith("whole") else math.nan
    print()
    print("| prompt | budget MB | batch tokens | batches | TTFT ms | TTFT ÷ whole-bank | prompt MB read | MB read / "
          "prompt token | distinct picked MB | read ÷ distinct | tokens = unconstrained | peak weights MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, budget, s, same, distinct in rows:
        m = s.prompt_batch_tokens
        n_batches = math.ceil(s.n_prompt / m) if m else 1
        ratio = s.prompt_mb_read * MIB / distinct if distinct else math.nan
        print(f"| {label} | {budget} | {m} | {n_batches} | {s.ttft_ms:.0f} | {s.ttft_ms / base_ttft:.2f} | "
              f"{s.prompt_mb_read:.1f} | {s.prompt_mb_read / s.n_prompt:.2f} | {distinct / MIB:.1f} | {ratio:.2f} | "
              f"{'yes' if same else 'NO'} | {s.resident_weights_mb:.1f} ≤ {budget} |")
    at_min = rows[0]
    ratio = at_min[2].prompt_mb_read * MIB / at_min[4]
    print()
    print(f"at the minimum budget ({at_min[1]} MB): read ÷ distinct {ratio:.2f} (goal ≤ 2.0); greedy tokens "
          f"{'identical' if all(r[3] for r in rows) else 'DIFFER'} in {sum(r[3] for r in rows)} of {len(rows)} runs")
    return 0 if ratio <= 2.0 and all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
