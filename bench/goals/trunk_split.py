"""The split of one MoE budget between its trunk and its expert cache, as a tuning answer (issue 50).

One budget between the model's minimum and its dense bytes (the trunk streams by layer beside the
experts), run at ≥ 5 trunk shares (engine/knobs/knobs.py ``trunk_share``: percent of the room above
the minimum the trunk may keep resident, the rest for the expert cache) and at the engine's default
(``0`` = auto, engine/experts/budget_split.py default_trunk_share), each share one run of warm
rounds (its cold first round left out: auto chooses from a round's measured costs), the passes
over the shares interleaved so the host's drift falls on every share alike. Per share: tok/s (median of the rounds),
trunk and expert MiB read per token, the expert hit rate.

Then the disk: the run's read rate while it waits (bytes the kernel read per token ÷ the seconds a
token waited for weights) beside the disk's own rate for the same pattern, O_DIRECT reads sent as
the run's loaders send them (pattern_rate): per token the trunk shards the run re-read (its trunk
MiB per token, the plan's last shards), then per MoE layer as many random experts as the run
missed there (k × its miss rate), a layer's reads together — measured right after each pass's
default run, from that run's own figures. A latency-bound disk reads a burst of ten slices at a
lower rate than one of sixteen, so the cold pattern (every shard, all k picks a layer) overstates
what it gives this run; its rate, measured before and after the runs, is printed beside it.

    .venv/bin/python -m bench.goals.trunk_split [--model FILE] [--budget-mb N] [--shares 1,25,50,75,100]

Default model: a kimi-k3 synth (8 layers: KDA and gated MLA, a latent MoE, 256 experts top-16 in
MXFP4), written once to the cache dir. Goals: the default's tok/s ≥ 0.9 × the best share's; the
run's read rate while waiting ≥ 0.8 × the disk's rate for the pattern.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench.lib.cold_cache import drop_from_cache
from shardscope.engine.base.batch_reads import BatchReader
from shardscope.engine.base.errors import RunStopped
from shardscope.engine.base.units import MIB
from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout import budget_minimum as bm
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.runs.run_factory import open_run

PAGE = mmap.PAGESIZE
DEFAULT_SHARES = (1, 25, 50, 75, 100)


def k3_model() -> str:
    from shardscope.engine.cli.cli import main

    path = cache_dir() / "bench" / "kimi-k3-256x16-48mb.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        assert main(["synth", "--moe", "--arch", "kimi-k3", "--size-mb", "48", "--layers", "8", "--experts", "256",
                     "--experts-used", "16", "--out", str(path), "--quiet"]) == 0
    return str(path)


def warm_rounds(settings: RunSettings, rounds: int):
    """One run of ``rounds`` + 1 rounds from a cold page cache; the first round (cold, and where auto
    has measured nothing yet) is left out. Returns (the rounds' summaries, the split of the last)."""
    drop_from_cache(settings.model_path)
    rows = []
    with open_run(settings) as run:
        def on_summary(summary) -> None:
            rows.append(summary)
            if len(rows) > rounds:
                run.stop()
        try:
            run.run(continuous=True, on_summary=on_summary)
        except RunStopped:
            pass
        return rows[1:rounds + 1], run.split


def pattern_rate(path: str, settings: RunSettings, n_tokens: int, seed: int = 1, trunk_bytes: int | None = None,
                 experts_per_layer: int | None = None) -> float:
    """MB/s (10^6 B/s) of the disk for a read pattern: per token the trunk's last shards in order until
    ``trunk_bytes`` (default: every shard), then each MoE layer's ``experts_per_layer`` random experts
    (default k; their slices page-outward), O_DIRECT, read as the run's loaders read them: a shard's
    ranges together and a layer's slices together, each group sent in one call where the kernel takes
    batches (engine/base/batch_reads.py), else by 16 threads."""
    layout = load_layout(path)
    moe = read_moe_layout(layout)
    trunk = bm.trunk_plan_for(layout, moe, settings)
    shards = list(trunk.shards)
    if trunk_bytes is not None:  # the shards that stream: a pinned prefix stays, the suffix is re-read
        taken, total = [], 0
        for shard in reversed(shards):
            if total >= trunk_bytes:
                break
            taken.append(shard)
            total += shard.n_bytes
        shards = taken[::-1]
    k = moe.n_expert_used if experts_per_layer is None else experts_per_layer
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    batches = BatchReader.open(fd, path, os.fstat(fd).st_size)
    buffers: dict[int, mmap.mmap] = {}  # one per length: the bytes are thrown away, only the rate counts

    def outward(start: int, end: int) -> tuple[int, int]:
        return start // PAGE * PAGE, -(-end // PAGE) * PAGE

    def group(spans: list[tuple[int, int]]) -> int:
        """One group of reads, in flight together."""
        for lo, hi in spans:
            if hi - lo not in buffers:
                buffers[hi - lo] = mmap.mmap(-1, hi - lo)
        bufs = [buffers[hi - lo] for lo, hi in spans]
        if batches is not None:
            reads = [(ctypes.addressof(ctypes.c_char.from_buffer(b)), hi - lo, lo) for b, (lo, hi) in zip(bufs, spans)]
            return batches.send(reads).wait()
        return sum(threads.map(lambda a: os.preadv(fd, [a[0]], a[1][0]), zip(bufs, spans)))

    done = 0
    started = time.perf_counter()
    try:
        with ThreadPoolExecutor(16) as threads:
            for _ in range(n_tokens):
                for shard in shards:  # one shard at a time, its ranges together (the run's slots.load_many)
                    done += group([outward(*r) for r in shard.ranges])
                for layer in moe.layers:
                    picks = rng.sample(range(moe.n_expert), k)
                    done += group([outward(*r) for e in picks for r in moe.unit_ranges(layer, e)])
    finally:
        if batches is not None:
            batches.close()
        os.close(fd)
        for buf in buffers.values():
            buf.close()
    return done / (time.perf_counter() - started) / 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="an MoE GGUF (default: a kimi-k3 synth in the cache dir)")
    ap.add_argument("--budget-mb", type=float, default=None,
                    help="default: halfway between the minimum and the budget that holds the whole trunk (the trunk "
                         "streams at every share)")
    ap.add_argument("--shares", default=",".join(map(str, DEFAULT_SHARES)), help="trunk shares to run (percent)")
    ap.add_argument("--shard-mb", type=float, default=1)
    ap.add_argument("--tokens", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3, help="warm rounds per share (after a cold first round)")
    ap.add_argument("--passes", type=int, default=2, help="passes over the shares, interleaved")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    model = args.model or k3_model()
    base = RunSettings(model_path=model, shard_mb=args.shard_mb, n_gen=args.tokens, n_ctx=128, threads=args.threads)
    layout = load_layout(model)
    moe = read_moe_layout(layout)
    if moe is None:
        print(f"{model}: not an MoE file", file=sys.stderr)
        return 2
    minimum = bm.minimum_for(base)
    trunk = bm.trunk_plan_for(layout, moe, base)
    budget = args.budget_mb or (minimum.mb + bm.min_budget_mb(moe, False)) / 2
    shares = [int(x) for x in args.shares.split(",")]
    if len(shares) < 5:
        print("--shares: give at least 5 shares", file=sys.stderr)
        return 2
    print(f"model      {os.path.basename(model)}: trunk {trunk.streamable_bytes / MIB:.1f} MiB streamable, "
          f"experts {moe.expert_bytes / MIB:.1f} MiB ({moe.n_expert} x top-{moe.n_expert_used})")
    print(f"budget     {budget:g} MiB; minimum {minimum.mb} MiB ({minimum.parts()}); whole trunk resident from "
          f"{bm.min_budget_mb(moe, False)} MiB")
    # the disk's own rate for this read pattern, before and after the runs (this host's disk drifts
    # within minutes: the runs are held against the mean of the two)
    disk_before = pattern_rate(model, base, n_tokens=4)
    rows: dict[int, list] = {s: [] for s in [0, *shares]}
    splits: dict[int, object] = {}
    own_pattern: list[float] = []  # the disk's rate for the default run's own pattern, after each of its runs
    for p in range(args.passes):
        for share in rows:  # passes interleaved: the host's drift falls on every share alike
            summaries, split = warm_rounds(base.with_changes(budget_mb=budget, trunk_share=share), args.rounds)
            rows[share] += summaries
            splits[share] = split
            note = ""
            if share == 0:
                trunk_mib = statistics.median(x.dense_mb_per_token for x in summaries)
                hit = statistics.median(x.expert_hit_rate for x in summaries)
                misses = max(1, round(moe.n_expert_used * (1 - hit)))
                own_pattern.append(pattern_rate(model, base, n_tokens=4, seed=3 + p, trunk_bytes=int(trunk_mib * MIB),
                                                experts_per_layer=misses))
                note = (f" (auto chose {split.share} %; its pattern: {trunk_mib:.2f} trunk MiB and {misses} experts a "
                        f"layer per token, {own_pattern[-1]:.0f} MB/s)")
            print(f"  pass {p + 1} share {share or 'auto'}: " + ", ".join(f"{x.avg_ts:.2f}" for x in summaries)
                  + " tok/s" + note, flush=True)
    disk_after = pattern_rate(model, base, n_tokens=4, seed=2)
    cold = (disk_before + disk_after) / 2
    disk = statistics.mean(own_pattern)

    def med(share: int, key: str) -> float:
        return statistics.median(getattr(s, key) for s in rows[share])

    print(f"\n{'share':>8} {'trunk MiB':>9} {'cache MiB':>9} {'tok/s':>7} {'trunk MiB/tok':>13} {'expert MiB/tok':>14} "
          f"{'expert hit':>10} {'read MB/s waiting':>17}")
    waiting = {}
    for share in rows:
        sp = splits[share]
        read_mb = med(share, "read_mb_per_token") * MIB / 1e6
        wait_s = med(share, "wait_ms_per_token") / 1000
        waiting[share] = read_mb / wait_s if wait_s > 0 else float("inf")
        label = f"auto={sp.share}" if share == 0 else str(share)
        print(f"{label:>8} {sp.trunk_bytes / MIB:9.1f} {sp.cache_bytes / MIB:9.1f} {med(share, 'avg_ts'):7.2f} "
              f"{med(share, 'dense_mb_per_token'):13.2f} {med(share, 'expert_mb_per_token'):14.2f} "
              f"{med(share, 'expert_hit_rate'):10.1%} {waiting[share]:17.0f}")
    best = max(shares, key=lambda s: med(s, "avg_ts"))
    ratio = med(0, "avg_ts") / med(best, "avg_ts")
    twin = [s for s in shares if (splits[s].trunk_bytes, splits[s].cache_bytes) == (splits[0].trunk_bytes,
                                                                                    splits[0].cache_bytes)]
    if twin:  # the same bytes each side: any tok/s between them is the host's, not the split's
        spread = [x.avg_ts for x in rows[0] + rows[twin[0]]]
        print(f"\nauto's split is share {twin[0]}'s (the same trunk and cache bytes); their rounds ran "
              f"{min(spread):.2f}-{max(spread):.2f} tok/s: the host's spread")
    read_ratio = waiting[0] / disk
    print(f"\ndisk       {disk:.0f} MB/s for the default run's own pattern (O_DIRECT, read as the run reads; "
          f"{', '.join(f'{x:.0f}' for x in own_pattern)} after its runs); the cold pattern {cold:.0f} "
          f"({disk_before:.0f} before the runs, {disk_after:.0f} after): the default read {waiting[0] / cold:.2f}"
          " of that")
    print(f"goal       default (auto = {splits[0].share} %) tok/s / best ({best} %) = {ratio:.2f} (goal >= 0.9): "
          f"{'met' if ratio >= 0.9 else 'MISSED'}")
    print(f"goal       the default's read rate while waiting / the disk's = {read_ratio:.2f} (goal >= 0.8): "
          f"{'met' if read_ratio >= 0.8 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
