"""Which run a settings gets: expert streaming for MoE models over their budget, else layer streaming.

Bench, sweep, tune and the app worker all open runs here, so an MoE model behaves the
same in each of them.
"""

from __future__ import annotations

import time
from typing import Callable

from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.stream.model_lock import ModelLock


def is_moe(settings: RunSettings) -> bool:
    """Whether the model has routed experts (cheap: the layout cache; malformed MoE files are refused)."""
    from shardscope.engine.experts.expert_run import moe_layout_for

    return moe_layout_for(settings) is not None


def streams_experts(settings: RunSettings) -> bool:
    """Whether open_run would stream experts (an MoE model over its budget) rather than layers."""
    from shardscope.engine.experts.expert_run import moe_layout_for
    from shardscope.engine.layout.moe_layout import streams_experts as over_budget

    return over_budget(moe_layout_for(settings), settings.budget_mb)


def check_run(settings: RunSettings) -> None:
    """Refuse (ShardscopeError) what open_run's run would refuse before loading anything."""
    from shardscope.engine.experts.expert_run import cache_bytes_for, moe_layout_for
    from shardscope.engine.stream.streaming_run import prepare_plan

    if streams_experts(settings):
        cache_bytes_for(moe_layout_for(settings), settings)
    else:
        prepare_plan(settings)


def row_columns(settings: RunSettings, trace_path: str | None = None) -> tuple[list[str], str]:
    """The CSV columns of the row open_run's run will write, and what kind of run that is
    (so a CSV of the other kind is refused before loading, not after the run)."""
    from shardscope.engine.experts.expert_run import moe_layout_for
    from shardscope.engine.layout.moe_layout import streams_experts as streams_experts_of
    from shardscope.engine.output.csv_out import run_columns

    moe = moe_layout_for(settings)
    if moe is not None and (trace_path or streams_experts_of(moe, settings.budget_mb)):
        return run_columns(), "an expert-streaming run"  # one header for both kinds (csv_out.run_columns)
    return run_columns(), "a layer-streaming run"


def open_run(settings: RunSettings, *, on_sample: Callable | None = None, trace_path: str | None = None,
             sample_interval_s: float = 0.1, on_token: Callable | None = None, on_phase: Callable | None = None,
             streams: str | None = None):
    """A StreamingRun, or an ExpertRun for an MoE model that exceeds the budget (or when a trace is asked for).

    ``streams`` ("layers" or "experts") overrides the choice: benches compare the two kinds on one model."""
    from shardscope.engine.experts.expert_run import ExpertRun, moe_layout_for
    from shardscope.engine.layout.moe_layout import streams_experts as streams_experts_of
    from shardscope.engine.stream.streaming_run import StreamingRun

    moe = moe_layout_for(settings)  # refuses malformed MoE files before llama.cpp can abort on them
    experts = streams == "experts" or (streams is None and moe is not None
                                       and bool(trace_path or streams_experts_of(moe, settings.budget_mb)))
    if trace_path and not experts:
        raise ShardscopeError(f"--trace {trace_path}: {settings.model_path or 'the model'} has no experts to trace")
    lock = ModelLock(resolve_model_path(settings.model_path))
    lock.others()  # a run already streaming this model is seen before this one loads
    watched = _watch_sharing(lock, on_sample)
    try:
        if experts:
            run = ExpertRun(settings, trace_path=trace_path, on_sample=watched, sample_interval_s=sample_interval_s,
                            on_token=on_token, on_phase=on_phase)
        else:
            run = StreamingRun(settings, on_sample=watched, sample_interval_s=sample_interval_s, on_token=on_token,
                               on_phase=on_phase)
    except BaseException:
        lock.release()
        raise
    return _holding(run, lock)


def _watch_sharing(lock: ModelLock, on_sample: Callable | None) -> Callable:
    """on_sample, plus a look at the model's lock holders once a second (the first of two runs
    learns of the second this way)."""
    last = [time.monotonic()]

    def sampled(sample) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0:
            last[0] = now
            lock.others()
        if on_sample is not None:
            on_sample(sample)

    return sampled


def _mark_shared(summary, lock: ModelLock) -> None:
    """Say in the row (evict_mechanism) when another run shared this model's eviction."""
    lock.others()
    note = lock.shared_note()
    if note and note not in summary.evict_mechanism:
        summary.evict_mechanism = f"{summary.evict_mechanism}; {note}"


def _holding(run, lock: ModelLock):
    """The run, its summaries marked when eviction was shared, its close releasing the lock.

    Hooked on the instance here, not in the run classes, so layer and expert runs (and
    whatever single skeleton replaces them) get the same lock from the one place that opens runs."""
    run.model_lock = lock
    run_rounds, close = run.run, run.close

    def run_marked(continuous: bool = False, on_summary: Callable | None = None):
        def marked(summary) -> None:
            _mark_shared(summary, lock)
            on_summary(summary)

        summary = run_rounds(continuous=continuous, on_summary=marked if on_summary else None)
        _mark_shared(summary, lock)
        return summary

    def close_and_release() -> None:
        try:
            close()
        finally:
            lock.release()  # after the mapping is gone

    run.run, run.close = run_marked, close_and_release
    return run


__all__ = ["open_run", "is_moe", "streams_experts", "check_run", "row_columns"]
