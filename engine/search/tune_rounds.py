"""Measuring one auto-tune candidate: one run, its cold first round left out, warm rounds until
its projected figure's interval is known (engine/search/tune.py's step 3), stalled rounds not counted."""

from __future__ import annotations

import math
import statistics
from typing import Callable

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.stream.streaming_run import RunSummary

__all__ = ["MIN_ROUNDS", "MAX_ROUNDS", "TARGET_REL", "measure_rounds", "round_terms"]

MIN_ROUNDS = 3
MAX_ROUNDS = 8
TARGET_REL = 0.03  # an interval this narrow (± of its mean) is known well enough


def round_terms(summary: RunSummary, device_id: str) -> tuple | None:
    """(ssd_s, dram_s, compute_s, overlapped) of a round's projection; None where it has none."""
    from shardscope.engine.devices.run_projection import projection_for

    try:
        p = projection_for(summary, device_id)
    except ShardscopeError:
        return None
    figure = summary.projected_ts
    if not (isinstance(figure, float) and math.isfinite(figure) and abs(p.tokens_per_s - figure) <= 0.01 * figure):
        return None  # the terms must be those of the figure ranked (a replayed row may carry another)
    return p.terms["ssd"], p.terms["dram"], p.terms["compute"], bool(p.overlapped)


def measure_rounds(settings: RunSettings, device_id: str, enough: Callable[[list[RunSummary]], bool],
                   should_stop: Callable[[], bool] | None = None) -> tuple[list[RunSummary], int]:
    """One run of ``settings``: its first round cold (not returned), then warm rounds, each
    projected onto the device, until ``enough(counted rounds)``; rounds whose host stalled are
    not counted. Returns (counted rounds, stalled rounds)."""
    from shardscope.engine.devices.run_projection import round_stall
    from shardscope.engine.measure import host_steal
    from shardscope.engine.measure.compute_window import settled
    from shardscope.engine.runs.bench_command import attach_projection
    from shardscope.engine.runs.run_factory import open_run

    counted: list[RunSummary] = []
    state = {"rounds": 0, "stalled": 0, "mark": host_steal.reading(), "ttft": []}
    with open_run(settings) as run:
        def on_summary(summary: RunSummary) -> None:
            now = host_steal.reading()
            steal, state["mark"] = host_steal.share(state["mark"], now), now
            state["rounds"] += 1
            if state["rounds"] > 1 and not summary.stopped and settled(summary,
                                                                       state["rounds"]):  # the cold round, then until
                # the compute estimate stands on enough tokens, are the warm-up
                ttft = state["ttft"]
                usual = statistics.median(ttft) if len(ttft) >= 2 else math.nan
                if round_stall(summary, steal, usual):
                    state["stalled"] += 1
                else:
                    attach_projection(summary, device_id)
                    counted.append(summary)
                    ttft.append(summary.ttft_ms)
            if (enough(counted) or (should_stop is not None and should_stop())
                    or state["rounds"] > 3 * MAX_ROUNDS):  # a host stalling every round: give up on more
                run.stop()

        run.run(continuous=True, on_summary=on_summary)
    return counted, state["stalled"]
