"""The two own-slot I/O paths on the same model in one run: mremap (Linux's default) against the
portable POSIX path (pread into anonymous memory placed with MAP_FIXED: what macOS takes),
engine/stream/io_path.py.

Runs alternate A B A B … (``--rounds`` pairs; ``--order ABBA`` flips every second pair), each
from a cold page cache, so noise from a
shared CPU or a noisy disk hits both paths alike. Per run: tok/s, kernel CPU-seconds per GB read
(getrusage system time of this process ÷ its /proc/self/io read_bytes), and the peak resident
weights read by another process (Rss of every VMA in the model's address range from
/proc/<pid>/smaps, the run frozen while it is read: bench/goals/moe_scale.py's OutsideWatch) against the
budget. Then medians and portable ÷ mremap tok/s (goal ≥ 0.9).

Usage:
  .venv/bin/python -m bench.goals.io_paths --model BIG.gguf [--budget-mb 2048] [--tokens 6] [--rounds 2]
  .venv/bin/python -m bench.goals.io_paths --dense-mb 4096   # writes (once) a dense synth into the cache dir
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bench.goals.moe_scale import streamed_run
from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.stream.io_path import ENV, MREMAP, PORTABLE

MIB = 1024 * 1024
GB = 1e9


def dense_model(size_mb: int) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model

    path = cache_dir() / "bench" / f"dense-{size_mb}mb.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"writing {path} ({size_mb} MiB, once) …", flush=True)
        write_synthetic_model(path, size_mb, seed=11)
    return str(path)


def one(model: str, path: str, args, is_moe: bool) -> dict:
    os.environ[ENV] = path
    t0 = time.perf_counter()
    if is_moe:
        r = streamed_run(model, args.budget_mb, args.tokens, args.threads, args.expert_policy, False)
    else:
        r = streamed_run(model, args.budget_mb, args.tokens, args.threads, "pinned", None)
    s = r["summary"]
    if s.io_path != path:
        raise SystemExit(f"io_paths: asked for {path}, the run took {s.io_path} ({r['note'] or 'no note'})")
    r["seconds"] = time.perf_counter() - t0
    print(f"{path:9s} {s.avg_ts:7.3f} tok/s  kernel CPU {r['cpu_s_per_gb']:.3f} s/GB  "
          f"read {s.read_mb_per_token:.0f} MiB/token  ttft {s.ttft_ms / 1000:.1f} s  "
          f"resident weights: engine {s.resident_weights_mb:.0f} MiB, outside peak {r['peak_outside'] / MIB:.0f} MiB "
          f"({r['n_samples']} samples) vs budget {args.budget_mb:.0f}  [{r['seconds']:.0f} s]", flush=True)
    return r


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a GGUF larger than the budget (MoE or dense)")
    parser.add_argument("--dense-mb", type=int, default=0, help="no --model: a dense synth of this size (cached)")
    parser.add_argument("--budget-mb", type=float, default=2048)
    parser.add_argument("--tokens", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="A B pairs (mremap, portable), interleaved")
    parser.add_argument("--expert-policy", default="lru")
    parser.add_argument("--order", choices=("ABAB", "ABBA"), default="ABAB",
                        help="ABBA flips every second pair, so a drift over the run (load, disk) favours neither path")
    args = parser.parse_args()
    if not args.model and not args.dense_mb:
        parser.error("--model or --dense-mb is needed")
    model = args.model or dense_model(args.dense_mb)
    layout = read_layout(model)
    is_moe = read_moe_layout(layout) is not None
    size = os.path.getsize(model)
    print(f"model   {Path(model).name}: {size / GB:.1f} GB, {'MoE' if is_moe else 'dense'}; budget "
          f"{args.budget_mb:.0f} MiB, {args.threads} threads, {args.tokens} tokens, cold cache before each run, "
          f"runs interleaved mremap/portable × {args.rounds} ({args.order})", flush=True)
    runs: dict[str, list[dict]] = {MREMAP: [], PORTABLE: []}
    for i in range(args.rounds):
        pair = (MREMAP, PORTABLE) if args.order == "ABAB" or i % 2 == 0 else (PORTABLE, MREMAP)
        for path in pair:
            runs[path].append(one(model, path, args, is_moe))
    med = {p: statistics.median(r["summary"].avg_ts for r in rs) for p, rs in runs.items()}
    cpu = {p: statistics.median(r["cpu_s_per_gb"] for r in rs) for p, rs in runs.items()}
    peak = {p: max(r["peak_outside"] for r in rs) / MIB for p, rs in runs.items()}
    for p in runs:
        print(f"median {p:9s} {med[p]:.3f} tok/s, kernel CPU {cpu[p]:.3f} s/GB, outside peak resident "
              f"{peak[p]:.0f} MiB (budget {args.budget_mb:.0f})")
    ratio = med[PORTABLE] / med[MREMAP] if med[MREMAP] else float("nan")
    within = all(p <= args.budget_mb for p in peak.values())
    print(f"portable ÷ mremap tok/s {ratio:.3f} (goal ≥ 0.9: {'met' if ratio >= 0.9 else 'NOT met'}); "
          f"kernel CPU portable ÷ mremap {cpu[PORTABLE] / max(cpu[MREMAP], 1e-9):.2f}; resident weights ≤ budget "
          f"(outside watch): {'yes' if within else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
