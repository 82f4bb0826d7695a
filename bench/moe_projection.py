"""The MoE projection checked at small scale: projected vs measured tok/s under an emulated SSD.

The README's 1.56 TB example projects a MoE token as

    s/token = compute + bytes from SSD / SSD rate,  bytes = dense streamed + (1 - hit) x picked experts' bytes

(misses are waited for, so the terms add). This script runs the same arithmetic on a
synthetic MoE with the example's routing ratio, here, and compares it with what the
run does under engine/stream/ssd_rate_limiter.py at each emulated bandwidth:

1. writes (once, cached) a synthetic MoE: 96 experts per layer, 2 picked per token
   (2/96 = Kimi K2's 8/384 = 2.08 % of the experts per token), one shared expert like
   Kimi's; dense share ~5 % (Kimi K2 ~2.4 %: at this size the embeddings weigh more);
   96 rather than 384 experts because at ≤ 150 MB 384 experts would be ~100 KB each
   and the prompt pass, which may pick every expert of a layer, would need a cache of
   a whole layer's experts (the floor grows with the count);
2. a reference run with no emulation (after a warm-up run), budget = dense + 30 % of
   the expert bytes: its routing trace, replayed at the same cache size, gives the hit
   rate; picked experts' bytes come from the GGUF's tensor table;
3. one run per emulated bandwidth (default 200, 400, 860 MB/s), same settings;
4. prints per bandwidth: projected tok/s = 1 / (compute + bytes / rate), with bytes from
   the formula (replayed hit rate, not the run's counters) and compute = the run's own
   decode time minus its time waiting for experts (like bench/projection_validation.py
   for dense models: a shared host's compute varies more between runs than the SSD
   term under test), and a second projection from the reference run's compute (the
   real use: measure once, predict another disk). Then measured tok/s, the errors, and
   the run's own hit rate and MB/token as a cross-check.

Goal: within 15 %. Run when the machine is quiet; < 3 min with the defaults.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shardscope.engine.experts.expert_streaming import min_cache_bytes  # noqa: E402
from shardscope.engine.layout.gguf_layout import read_layout  # noqa: E402
from shardscope.engine.layout.moe_layout import read_moe_layout  # noqa: E402
from shardscope.engine.devices.projection import moe_ssd_bytes_per_token  # noqa: E402
from shardscope.engine.experts.replay import replay_one  # noqa: E402
from shardscope.engine.experts.routing_trace import read_trace  # noqa: E402
from shardscope.engine.knobs.settings import RunSettings  # noqa: E402
from shardscope.engine.base.user_dirs import cache_dir  # noqa: E402
from shardscope.engine.runs.run_factory import open_run  # noqa: E402

MIB = 1024 * 1024
PROMPT = "The history of the printing press begins"
N_EXPERT, N_USED, N_SHARED = 96, 2, 1


def model_path(size_mb: int) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = cache_dir() / "bench" / f"moe-{N_EXPERT}x{N_USED}-shexp{N_SHARED}-{size_mb}mb.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_synthetic_model(path, size_mb, moe=MoeSpec(N_EXPERT, N_USED, shared_experts=N_SHARED,
                                                         routing_skew=1.0), seed=17)
    return str(path)


def run(settings: RunSettings, trace: str | None = None):
    from bench.cold_cache import drop_from_cache

    drop_from_cache(settings.model_path)
    with open_run(settings, trace_path=trace) as r:
        summary = r.run()
        return summary, r.cache_bytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=150)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache-share", type=float, default=0.30, help="expert cache as a share of the expert bytes")
    ap.add_argument("--ssd-mb-s", default="200,400,860", help="emulated SSD rates (MB/s = 10^6 B/s)")
    args = ap.parse_args(argv)
    rates = [float(x) for x in args.ssd_mb_s.split(",")]

    path = model_path(args.size_mb)
    moe = read_moe_layout(read_layout(path))
    used_bytes = N_USED * sum(moe.unit_bytes(layer) for layer in moe.layers)  # picked experts, one token
    cache = max(args.cache_share * moe.expert_bytes, min_cache_bytes(moe, False) + MIB)  # the prompt's floor
    budget_mb = (moe.dense_bytes + cache) / MIB
    base = RunSettings(model_path=path, budget_mb=int(budget_mb) + 1, n_gen=args.tokens, n_ctx=128,
                       threads=args.threads, prompt=PROMPT)
    print(f"model: {Path(path).name}: {moe.total_bytes / MIB:.0f} MiB, {len(moe.layers)} layers, {N_EXPERT} experts "
          f"({N_USED} picked + {N_SHARED} shared), dense {moe.dense_bytes / moe.total_bytes:.1%}; budget "
          f"{base.budget_mb} MB = dense + {cache / moe.expert_bytes:.0%} of the experts; picked experts "
          f"{used_bytes / MIB:.2f} MiB per token")

    run(base.with_changes(n_gen=4))  # warm-up: the first load of a process pays for llama.cpp's setup
    with tempfile.TemporaryDirectory(prefix="moe-projection-") as tmp:
        trace_path = str(Path(tmp) / "ref.jsonl")
        ref, cache_bytes = run(base, trace_path)
        hit = replay_one(read_trace(trace_path), "lru", cache_bytes).expert_hit_rate
    ssd_bytes = moe_ssd_bytes_per_token(0.0, used_bytes, hit)  # dense weights stay resident: none streamed
    print(f"reference (no emulation): {ref.avg_ts:.2f} tok/s, compute {ref.compute_ms_per_token:.1f} ms/token, "
          f"replayed hit rate {hit:.1%} (run: {ref.expert_hit_rate:.1%}) → {ssd_bytes / 1e6:.2f} MB/token from SSD")
    print()
    print("| emulated SSD MB/s | compute ms/token | projected tok/s | measured tok/s | error | "
          "projected from reference | error | measured hit rate | expert MB/token (measured) |")
    print("|---|---|---|---|---|---|---|---|---|")
    errors = []
    for rate in rates:
        s, _ = run(base.with_changes(ssd_mb_s=rate))
        projected = 1.0 / (s.compute_ms_per_token / 1000 + ssd_bytes / (rate * 1e6))
        from_ref = 1.0 / (ref.compute_ms_per_token / 1000 + ssd_bytes / (rate * 1e6))
        error = (projected - s.avg_ts) / s.avg_ts * 100
        error_ref = (from_ref - s.avg_ts) / s.avg_ts * 100
        errors.append(abs(error))
        print(f"| {rate:g} | {s.compute_ms_per_token:.1f} | {projected:.2f} | {s.avg_ts:.2f} | {error:+.1f} % | {from_ref:.2f} | {error_ref:+.1f} % | {s.expert_hit_rate:.1%} | "
              f"{s.expert_mb_per_token * MIB / 1e6:.2f} |")
    print()
    print(f"worst error {max(errors):.1f} % with each run's compute (goal ≤ 15 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
