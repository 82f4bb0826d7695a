"""Sweeps: run every combination of knob values, one run each, its figure's interval, one CSV row each.

A sweep is a cartesian product of knob lists (``expand_grid``), run in order
(``iter_sweep``): each combination gets a fresh run from ``open_run`` (layer or expert streaming), so each run
starts cold the way the engine starts every run (llama.cpp maps the file, then the
cold start evicts every non-pinned shard from memory and page cache; the globals stay).
That first round is the warm-up (the load's reads, the cache filling) and is not counted;
then warm rounds of the same settings run until the figure's interval is known
(engine/search/interval_decision.py: at least ``min_rounds``, at most ``max_rounds``, fewer
where the interval is narrow or lies wholly below the best so far), rounds whose host
stalled left out. One cold round each ranked the host's noise (issue 48). The CSV row of a
combination is its warm round nearest the interval's mean; ``SweepResult.rounds`` holds them
all. ``max_rounds=0`` gives the old sweep: the cold round alone.

A combination the engine refuses before loading (budget below the minimum for
that shard size and prefetch depth) is *skipped* with a one-line reason; it does not
stop the sweep. ``run_sweep`` appends each finished run's row to the CSV right away
(``engine.output.csv_out.append_rows`` rewrites through a temp file and a rename), so an
interrupted sweep keeps every row already written.

The GUI drives ``iter_sweep`` directly: ``should_stop`` is polled during each run
(the run stops at the next token) and between runs.
"""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knob_ranges import KNOBS
from shardscope.engine.knobs.knobs import describe
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.stream.streaming_run import RunSummary

__all__ = ["SweepResult", "SweepTotals", "expand_grid", "iter_sweep", "run_sweep", "describe_settings",
           "check_csv_columns", "GRID_KEYS"]

GRID_KEYS = tuple(KNOBS)  # the knobs a sweep may vary (RunSettings field names)


@dataclass(frozen=True)
class SweepResult:
    """One combination: ``summary`` when it ran, ``error`` when it was skipped or failed.

    ``skipped`` marks a combination refused before loading (not a failure of the
    run); ``stopped`` a run cut short by ``should_stop`` (its summary is partial).
    ``index`` counts from 0 over ``total`` combinations.
    """

    settings: RunSettings
    summary: RunSummary | None
    error: str | None
    index: int = 0
    total: int = 0
    skipped: bool = False
    stopped: bool = False
    rounds: tuple = ()  # the warm rounds counted (empty: ``summary`` alone, a cold round)
    stalled: int = 0  # warm rounds left out: the host stalled

    def interval(self, key: str = "avg_ts"):
        """The figure's interval over the counted rounds (engine/search/interval_decision.Interval)."""
        from shardscope.engine.search.interval_decision import interval

        if self.summary is None:
            return None
        return interval([getattr(s, key) for s in (self.rounds or (self.summary,))])

    @property
    def ok(self) -> bool:
        return self.summary is not None and self.error is None and not self.stopped


def expand_grid(base: RunSettings, grid: dict[str, list]) -> list[RunSettings]:
    """Every combination of ``grid``'s values applied to ``base`` (the last knob varies fastest).

    Knobs are RunSettings field names (``shard_mb``, ``threads``, ...); a knob
    not in ``grid`` keeps ``base``'s value. Duplicate combinations are dropped.
    """
    for key, values in grid.items():
        if key not in GRID_KEYS:
            raise ShardscopeError(f"sweep: unknown knob {key!r} (knobs: {', '.join(GRID_KEYS)})")
        if not isinstance(values, (list, tuple)) or not values:
            raise ShardscopeError(f"sweep: knob {key!r} needs at least one value")
    keys = list(grid)
    combos = [base.with_changes(**dict(zip(keys, values)))
              for values in itertools.product(*(grid[k] for k in keys))]
    return list(dict.fromkeys(combos))


def describe_settings(s: RunSettings, keys=GRID_KEYS) -> str:
    """"shard 64 MB, depth 2, threads 2, ..." for notes and progress lines."""
    return describe(s, keys)


def _check_model(base: RunSettings) -> None:
    """A bad model file is fatal for every combination: refuse it once, up front."""
    from shardscope.engine.base.bundled_model import resolve_model_path
    from shardscope.engine.layout.layout_cache import load_layout

    load_layout(resolve_model_path(base.model_path))


def _run_one(settings: RunSettings, device: str | None, should_stop: Callable[[], bool] | None,
             enough: Callable[[list[RunSummary]], bool] | None, key: str) -> tuple[RunSummary, tuple, int, bool]:
    """A run from cold: its first round the warm-up, then warm rounds until ``enough`` (None: the cold
    round alone). Raises ShardscopeError. Returns (the row's summary, counted rounds, stalled, stopped)."""
    from shardscope.engine.devices.run_projection import round_stall
    from shardscope.engine.measure.compute_window import settled
    from shardscope.engine.runs.bench_command import attach_projection
    from shardscope.engine.runs.run_factory import open_run

    warm: list[RunSummary] = []
    seen = {"rounds": 0, "stalled": 0}
    with open_run(settings) as run:
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.1):
                if should_stop():
                    run.stop()
                    return

        def on_summary(summary: RunSummary) -> None:
            seen["rounds"] += 1
            if enough is None or summary.stopped or seen["rounds"] == 1 or not settled(summary, seen["rounds"]):
                return  # the cold round (the row when no warm rounds are asked), then the compute estimate's warm-up
            if round_stall(summary):
                seen["stalled"] += 1
            else:
                if device:
                    attach_projection(summary, device)
                warm.append(summary)
            if enough(warm) or seen["rounds"] > 3 * 8 + 1:  # a host stalling every round: give up on more
                run.stop()

        watcher = threading.Thread(target=watch, name="shardscope-sweep-stop", daemon=True) if should_stop else None
        if watcher:
            watcher.start()
        try:
            last = run.run(continuous=enough is not None, on_summary=on_summary)
        finally:
            done.set()
            if watcher:
                watcher.join(timeout=1)
        stopped = bool(should_stop and should_stop()) or (enough is None and (last.stopped or run.stopping))
    if not warm:
        if not stopped and device and not last.stopped:
            attach_projection(last, device)
        return last, (), seen["stalled"], stopped or last.stopped
    values = [getattr(r, key) for r in warm]
    mid = sum(values) / len(values)
    return min(warm, key=lambda r: abs(getattr(r, key) - mid)), tuple(warm), seen["stalled"], stopped


def iter_sweep(base: RunSettings, grid: dict[str, list], *, device: str | None = None,
               should_stop: Callable[[], bool] | None = None, min_rounds: int = 3,
               max_rounds: int = 8) -> Iterator[SweepResult]:
    """Run every combination of ``grid`` over ``base``, yielding each result as it finishes.

    A refused combination yields ``skipped=True`` with the reason in ``error``; a
    run that fails yields its one-line error and the sweep goes on. With ``device``
    each summary gets its projection columns. When ``should_stop()`` turns true the
    current run stops at its next token, is yielded with ``stopped=True``, and the
    iteration ends. A bad model file raises ShardscopeError before any run. Each run's warm
    rounds (module doc) are measured on the projected figure with ``device``, else on tok/s.
    """
    from shardscope.engine.runs.run_factory import check_run
    from shardscope.engine.search.interval_decision import enough_rounds

    combos = expand_grid(base, grid)
    _check_model(base)
    if device:
        from shardscope.engine.devices.devices import get_device

        get_device(device)  # an unknown id is refused before the first run, not after it
    total = len(combos)
    key = "projected_ts" if device else "avg_ts"
    best = None  # the best interval so far: a run wholly below it stops early

    def enough_for(against):
        if max_rounds <= 0:
            return None
        return lambda rounds: enough_rounds([getattr(r, key) for r in rounds], against,
                                            min_n=min(min_rounds, max_rounds),
                                            max_n=max_rounds)

    for index, settings in enumerate(combos):
        if should_stop and should_stop():
            return
        try:
            check_run(settings)  # as open_run will run it: layer streaming or expert streaming
        except ShardscopeError as exc:
            yield SweepResult(settings, None, str(exc), index, total, skipped=True)
            continue
        try:
            summary, rounds, stalled, stopped = _run_one(settings, device, should_stop, enough_for(best), key)
        except ShardscopeError as exc:
            if should_stop and should_stop():
                yield SweepResult(settings, None, str(exc), index, total, stopped=True)
                return
            yield SweepResult(settings, None, str(exc), index, total)
            continue
        result = SweepResult(settings, summary, None, index, total, stopped=stopped, rounds=rounds, stalled=stalled)
        got = result.interval(key) if not stopped else None
        if got is not None and (best is None or got.mean > best.mean):
            best = got
        yield result
        if stopped:
            return


@dataclass
class SweepTotals:
    combinations: int = 0
    rows_written: int = 0
    skipped: int = 0
    failed: int = 0
    stopped: bool = False


def check_csv_columns(csv_path: str) -> None:
    """Refuse a CSV with other columns, or a path that cannot be written, before the first run."""
    from shardscope.engine.output.csv_out import run_columns
    from shardscope.engine.runs.output_checks import check_csv_header, check_writable

    check_writable("--csv", csv_path)
    check_csv_header(csv_path, run_columns(), "a shardscope run")


def run_sweep(base: RunSettings, grid: dict[str, list], *, csv_path: str | None, device: str | None = None,
              should_stop: Callable[[], bool] | None = None,
              on_result: Callable[[SweepResult, SweepTotals], None] | None = None,
              min_rounds: int = 3, max_rounds: int = 8) -> SweepTotals:
    """``iter_sweep`` plus the CSV: one row appended per finished run, right after it.

    Stopped (partial) runs are not written. ``on_result`` sees every result and the
    running totals (the CLI's progress bar and notes).
    """
    from shardscope.engine.output.csv_out import append_rows, run_columns, run_row

    totals = SweepTotals(combinations=len(expand_grid(base, grid)))
    if csv_path:
        check_csv_columns(csv_path)
    for result in iter_sweep(base, grid, device=device, should_stop=should_stop, min_rounds=min_rounds,
                             max_rounds=max_rounds):
        if result.stopped:
            totals.stopped = True
        elif result.skipped:
            totals.skipped += 1
        elif result.error:
            totals.failed += 1
        elif result.summary is not None:
            if csv_path:
                append_rows(csv_path, run_columns(), [run_row(result.summary)])
            totals.rows_written += 1
        if on_result:
            on_result(result, totals)
    if should_stop and should_stop():
        totals.stopped = True
    return totals


def best_of(results: list[SweepResult], key: str = "avg_ts") -> SweepResult | None:
    """The finished run with the highest ``key`` (e.g. "projected_ts"), NaN-safe."""
    scored = [r for r in results if r.ok and isinstance(getattr(r.summary, key), (int, float))
              and not math.isnan(getattr(r.summary, key))]
    return max(scored, key=lambda r: getattr(r.summary, key), default=None)
