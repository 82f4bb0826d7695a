"""MoE expert streaming vs whole-layer streaming vs plain mmap, side by side, cold cache.

One synthetic 64-expert top-8 model (≥ 600 MB by default), budget = dense weights + ¼ of
the expert bytes. In one run, each from a cold page cache:

1. the disk's cold read speed (the bound, measured right before the streaming runs);
2. expert streaming (routing-driven loads, LRU expert cache, speculation off);
3. the same with speculation on (the next layer's likely experts loaded while this one
   computes), and both again with the ``hot`` policy;
4. whole-layer streaming of the same model (StreamingRun, one layer per shard);
5. plain mmap (llama.cpp alone, no controller) in a child process under a memory cap of the
   same size (cgroup v2 ``memory.max``, else v1 ``memory.limit_in_bytes``; bench/lib/memory_cap.py).

Last lines: expert ÷ whole-layer tok/s (goal ≥ 8), expert streaming efficiency =
tok/s ÷ (disk MB/s ÷ MB read per token) (goal ≥ 0.8), hit rate with and without
speculation.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.lib.cold_cache import disk_bound_mb_s, drop_from_cache
from bench.lib.plain_mmap import plain_mmap_capped
from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.runs.run_factory import open_run

MIB = 1024 * 1024
PROMPT = "The history of the printing press begins"


def moe_model(size_mb: int, skew: float) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = cache_dir() / "bench" / f"moe-64x8-{size_mb}mb-skew{skew:g}-routing-v2.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_synthetic_model(path, size_mb, moe=MoeSpec(64, 8, routing_skew=skew), seed=11)
    return str(path)


def expert_run(model: str, budget_mb: float, tokens: int, threads: int, speculation: bool, policy: str = "lru"):
    drop_from_cache(model)
    settings = RunSettings(model_path=model, budget_mb=budget_mb, n_gen=tokens, n_ctx=128, threads=threads,
                           prompt=PROMPT, expert_policy=policy, expert_speculation=speculation)
    with open_run(settings, streams="experts") as run:
        return run.run()


def layer_run(model: str, budget_mb: float, layer_mb: float, tokens: int, threads: int):
    """Whole-layer streaming: quarter-layer shards, the deepest prefetch the budget allows."""
    from shardscope.engine.base.errors import ShardscopeError

    for depth in (2, 1, 0):
        settings = RunSettings(model_path=model, budget_mb=int(budget_mb) + 1, shard_mb=max(1, int(layer_mb / 4)),
                               prefetch_depth=depth, policy="pinned", n_gen=tokens, n_ctx=128, threads=threads,
                               prompt=PROMPT)
        try:
            run = open_run(settings, streams="layers")
        except ShardscopeError:
            if depth == 0:
                raise
            continue
        drop_from_cache(model)
        with run:
            return run.run()


# ----------------------------------------------------------------- plain mmap, capped
# ----------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=640)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--routing-skew", type=float, default=0.0, help="0: a uniform router, the worst case")
    args = parser.parse_args()

    model = moe_model(args.size_mb, args.routing_skew)
    moe = read_moe_layout(read_layout(model))
    budget_mb = (moe.dense_bytes + moe.expert_bytes / 4) / MIB
    layer_mb = max(moe.unit_bytes(layer) * moe.n_expert for layer in moe.layers) / MIB
    print(f"model        {Path(model).name}: {os.path.getsize(model) / MIB:.0f} MB, {len(moe.layers)} layers, "
          f"{moe.n_expert} experts top-{moe.n_expert_used}, dense {moe.dense_bytes / MIB:.0f} MB, "
          f"experts {moe.expert_bytes / MIB:.0f} MB")
    print(f"budget       {budget_mb:.0f} MB = dense + ¼ of the experts; {args.tokens} tokens, "
          f"{args.threads} threads, cold cache before each run")

    disk, reads = disk_bound_mb_s(model)
    print(f"disk         {disk:.0f} MB/s cold ({', '.join(f'{k} {v:.0f}' for k, v in reads.items())})")
    t0 = time.perf_counter()
    plain = expert_run(model, budget_mb, args.tokens, args.threads, speculation=False)
    spec = expert_run(model, budget_mb, args.tokens, args.threads, speculation=True)
    # hot streams everything it has not pinned: guesses there compete with the pins.
    hot = expert_run(model, budget_mb, args.tokens, args.threads, speculation=False, policy="hot")
    hot_spec = expert_run(model, budget_mb, args.tokens, args.threads, speculation=True, policy="hot")
    whole = layer_run(model, budget_mb, layer_mb, args.tokens, args.threads)
    cap_mb = budget_mb + max(0.0, plain.peak_rss_mb - plain.resident_weights_mb)
    mmap_result, mmap_why = plain_mmap_capped(model, cap_mb, args.tokens, args.threads)

    print()
    print("| mode | tok/s | MB read/token | hit rate | waiting ms/token | computing ms/token |")
    print("|------|-------|---------------|----------|------------------|--------------------|")
    for name, s in (("experts (lru)", plain), ("experts (lru) + speculation", spec), ("experts (hot)", hot),
                    ("experts (hot) + speculation", hot_spec)):
        print(f"| {name} | {s.avg_ts:.2f} | {s.read_mb_per_token:.1f} | {100 * s.expert_hit_rate:.1f} % | "
              f"{s.expert_wait_ms_per_token:.1f} | {s.compute_ms_per_token:.1f} |")
    print(f"| whole layers | {whole.avg_ts:.2f} | {whole.read_mb_per_token:.1f} | – "
          f"| {whole.wait_ms_per_token:.1f} | – |")
    if mmap_result:
        print(f"| plain mmap, capped at {cap_mb:.0f} MB | {mmap_result['tok_s']:.2f} | "
              f"{mmap_result['read_mb_per_token']:.1f} | – | – | – |")
    else:
        print(f"| plain mmap | not run: {mmap_why} | | | | |")
    print(f"(all runs {time.perf_counter() - t0:.0f} s)")
    print()
    bound = disk / plain.read_mb_per_token if plain.read_mb_per_token > 0 else float("inf")
    for name, s in (("lru", spec), ("hot", hot_spec)):
        print(f"speculation  {name}: accuracy {100 * s.spec_accuracy:.1f} %, misses hidden "
              f"{100 * s.spec_hidden_share:.1f} %" if s.spec_accuracy == s.spec_accuracy
              else f"speculation  {name}: no guess needed a load (every guessed expert was resident)")
    print(f"hit rate     lru without speculation {100 * plain.expert_hit_rate:.1f} %, with "
          f"{100 * spec.expert_hit_rate:.1f} %; hot without {100 * hot.expert_hit_rate:.1f} %, with "
          f"{100 * hot_spec.expert_hit_rate:.1f} %")
    print(f"efficiency   expert streaming {plain.avg_ts / bound:.2f} (goal ≥ 0.8)")
    print(f"expert vs whole-layer tok/s ratio {plain.avg_ts / whole.avg_ts:.1f} (goal ≥ 8)")


if __name__ == "__main__":
    from shardscope.engine.base.errors import ShardscopeError

    try:
        main()
    except ShardscopeError as exc:
        sys.exit(f"moe_streaming: {exc}")
