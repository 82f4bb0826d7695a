"""Which run a settings gets: expert streaming for MoE models over their budget, else layer streaming.

Bench, sweep, tune and the app worker all open runs here, so an MoE model behaves the
same in each of them.
"""

from __future__ import annotations

from typing import Callable

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings


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
    if experts:
        return ExpertRun(settings, trace_path=trace_path, on_sample=on_sample, sample_interval_s=sample_interval_s,
                         on_token=on_token, on_phase=on_phase)
    if trace_path:
        raise ShardscopeError(f"--trace {trace_path}: {settings.model_path or 'the model'} has no experts to trace")
    return StreamingRun(settings, on_sample=on_sample, sample_interval_s=sample_interval_s, on_token=on_token,
                        on_phase=on_phase)


__all__ = ["open_run", "is_moe", "streams_experts", "check_run"]
