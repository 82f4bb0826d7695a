"""pinned vs lru at budget = ½ model, cold, side by side in one run.

Layer access is cyclic, so lru evicts every shard just before it is needed again
and reads the whole model per token; pinned keeps a fixed half resident and streams
the rest. Expected ratio ≥ 1.5.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bench.goals.streaming_efficiency import streaming_run
from bench.lib.bench_models import synthetic_model

MIB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--prefetch-depth", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    model = synthetic_model(args.size_mb)
    size_mb = os.path.getsize(model) / MIB
    budget = int(size_mb / 2)
    shard = max(8, int(size_mb / 32))
    results: dict[str, list] = {"pinned": [], "lru": []}
    for i in range(args.repeats):
        order = ["pinned", "lru"] if i % 2 == 0 else ["lru", "pinned"]
        for policy in order:
            s = streaming_run(model, budget, policy, args.prefetch_depth, shard, args.tokens, args.threads)
            results[policy].append(s)
            print(f"  {policy:6s} {s.avg_ts:5.2f} tok/s, {s.read_mb_per_token:6.0f} MB read/token, "
                  f"cache hit rate {100 * s.cache_hit_rate:5.1f} %, resident weights ≤ {s.resident_weights_mb:.0f} MB",
                  flush=True)
    best = {p: max(r.avg_ts for r in rs) for p, rs in results.items()}
    print(f"model {Path(model).name} ({size_mb:.0f} MB), budget {budget} MB, shard {shard} MB, "
          f"prefetch depth {args.prefetch_depth}, n_threads {args.threads}, best of {args.repeats}")
    print(f"pinned vs lru tok/s ratio {best['pinned'] / best['lru']:.2f} "
          f"(pinned {best['pinned']:.2f}, lru {best['lru']:.2f})")


if __name__ == "__main__":
    main()
