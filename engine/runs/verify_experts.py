"""`bench --verify` for expert runs: the expert figures next to sources the streamer does not compute.

- expert_mb_per_token (CSV): what the streamer says it loaded per decoded token, against the
  bytes the kernel read for this process (/proc/<pid>/io, read by the outside process) over
  the same tokens — dense weights stay resident, so every decode read is an expert's;
- expert residency (end of run): the bytes of the experts the cache's books hold, against
  mincore over those experts' pages through the outside process's own mapping;
- cache_hit_rate (CSV): against 1 − kernel-read ÷ the picked experts' bytes (sizes from the
  model file's layout, picks n_expert_used per layer per token). The kernel reads whole pages, so
  a pick is sized as its slices widened to pages: with slices that are not page-aligned (the
  Kimi-shaped file's 384 small experts, ~3 edge pages on ~33) exact sizes made a 26 % hit rate
  look like 20 % (docs/decisions.md, issue 28).
"""

from __future__ import annotations

from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MIB
from shardscope.engine.measure.metric_registry import BY_NAME
from shardscope.engine.runs.verify_report import Check, relative_difference


def read_unit_bytes(moe, layer: int) -> float:
    """What one miss of this layer makes the kernel read, on average over its experts: each slice
    widened to whole pages (from the file's layout, not the streamer's count)."""
    total = 0
    for expert in range(moe.n_expert):
        for start, end in moe.unit_ranges(layer, expert):
            lo, hi = memory_calls.page_outward(start, end)
            total += hi - lo
    return total / moe.n_expert


def expert_ranges(run) -> list[tuple[int, int]]:
    """Page-inward file ranges of every expert the cache's books hold now (what eviction drops)."""
    spans = []
    for layer, expert in sorted(run.streamer.resident_units()):
        for start, end in run.moe.unit_ranges(layer, expert):
            inner = memory_calls.page_inward(start, end)
            if inner:
                spans.append(inner)
    return spans


def residency_reading(run, watcher) -> tuple[float, ...]:
    """(the books' expert bytes, mincore's) in MiB, both over the same page-inward ranges; where the
    trunk streams, then (the books' resident trunk shards, mincore's) over those shards' ranges."""
    spans = expert_ranges(run)
    books = sum(hi - lo for lo, hi in spans)
    reading = (books / MIB, watcher.resident_bytes(spans) / MIB)
    trunk = getattr(run, "trunk", None)
    if trunk is None:
        return reading
    from shardscope.engine.stream.residency import PINNED, RESIDENT

    states = trunk.snapshot().states
    shards = [r for shard, state in zip(trunk.plan.shards, states) if state in (RESIDENT, PINNED) for r in shard.ranges]
    return reading + (sum(hi - lo for lo, hi in shards) / MIB, watcher.resident_bytes(shards) / MIB)


def expert_checks(summary, run, token_reads: dict, residency: tuple[float, float]) -> list[Check]:
    """The expert rows of ``bench --verify``."""
    checks = []
    n_decoded = summary.n_gen - 1
    first, last = token_reads.get("first"), token_reads.get("last")
    # A streamed trunk (run.trunk, a ResidencyController: engine/stream/residency.py) reads too: the
    # kernel's reads are then the experts' plus the trunk's shards (dense_mb_per_token), and every shard
    # is needed every token.
    trunk = getattr(run, "trunk", None)
    if first and last and n_decoded > 0:
        read = last["read_bytes"] - first["read_bytes"]
        outside_tok = read / MIB / n_decoded
        # Floor: a page per expert slice can be read around an expert's exact bytes.
        floor = run.moe.n_expert_used * len(run.moe.layers) * 3 * memory_calls.PAGE / MIB
        streamed = summary.expert_mb_per_token + (summary.dense_mb_per_token if trunk is not None else 0.0)
        label = "expert_mb_per_token + dense_mb_per_token (CSV)" if trunk is not None else "expert_mb_per_token (CSV)"
        checks.append(Check(label, BY_NAME["expert_mb_per_token"].source, streamed, outside_tok,
                            [relative_difference(streamed, outside_tok, floor=max(floor, 0.5))], "MiB"))
        needed = sum(read_unit_bytes(run.moe, layer) for layer in run.moe.layers) * run.moe.n_expert_used * n_decoded
        if trunk is not None:  # the trunk's shards, from the file's tensor table: each one every token
            needed += sum(hi - lo for shard in trunk.plan.shards for lo, hi in shard.ranges) * n_decoded
        kernel_hit = 1 - read / needed if needed else float("nan")
        checks.append(Check("cache_hit_rate (CSV)", BY_NAME["expert_hit_rate"].source, summary.cache_hit_rate,
                            kernel_hit, [relative_difference(summary.cache_hit_rate, kernel_hit, floor=1.0)], "of 1"))
    else:  # listed as NOT CHECKED with the reason, never left out
        why = "no decoded token" if n_decoded <= 0 else "no outside reading at the first and last token"
        checks.append(Check("expert_mb_per_token (CSV)", BY_NAME["expert_mb_per_token"].source,
                            float("nan"), float("nan"), [], "MiB", note=why))
        checks.append(Check("cache_hit_rate (CSV)", BY_NAME["expert_hit_rate"].source,
                            float("nan"), float("nan"), [], "of 1", note=why))
    books, outside = residency[:2]
    checks.append(Check("expert residency (end of run)", BY_NAME["expert_resident_mb"].source, books, outside,
                        [relative_difference(books, outside, floor=1.0)], "MiB"))
    if len(residency) > 2:
        books, outside = residency[2:]
        checks.append(Check("trunk residency (end of run)", "mincore over each resident trunk shard, another process",
                            books, outside, [relative_difference(books, outside, floor=1.0)], "MiB"))
    return checks


__all__ = ["expert_checks", "residency_reading", "expert_ranges"]
