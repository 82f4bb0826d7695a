"""The range each slider may offer for the open model and the other knobs: the values the
engine's own check (engine/runs/run_factory.check_run, what Run and a live change refuse by)
accepts, so a slider never offers a value the engine would refuse.

No bound is recomputed here. The budget's floor is the engine's one minimum
(engine/layout/budget_minimum.py ``minimum_for``; ``budget_floor_mb`` is the one place the
window asks for it). The other sliders' ends are the engine's answers: the bound a refusal
names (an expert cache "at most 73 MiB"), or the last value ``check_run`` accepts.

The knobs depend on each other (a deeper prefetch needs more budget, a smaller budget leaves
less expert cache), so the budget's floor is taken at the other knobs' values and the other
knobs' ranges at the budget: every combination offered together is one the engine runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardscope.app.files.model_probe import ModelInfo
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knob_refusal import KnobRefusal
from shardscope.engine.knobs.knobs import KNOBS
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout import budget_minimum
from shardscope.engine.runs.run_factory import check_run, streams_experts


@dataclass(frozen=True)
class SliderLimit:
    low: int
    high: int
    low_why: str = ""  # why the range ends there (shown beside the slider when a value is moved to it)
    high_why: str = ""
    off_below: bool = False  # the slider's lowest position means the knob's 0 ("auto") below ``low``


def budget_floor_mb(info: ModelInfo, settings: RunSettings) -> int:
    """The engine's minimum budget for this model at these settings, in whole MiB (accepted)."""
    settings = settings.with_changes(model_path=info.path)
    minimum_for = getattr(budget_minimum, "minimum_for", None)
    if minimum_for is not None:
        return int(minimum_for(settings).mb)
    if info.moe is not None:  # an engine without the one definition yet
        return int(budget_minimum.min_budget_mb(info.moe, settings.expert_speculation))
    from shardscope.engine.stream.streaming_run import min_budget_mb

    return math.ceil(min_budget_mb(info.plan, settings) - 1e-9)


def refusal(settings: RunSettings, **change) -> ShardscopeError | None:
    """The engine's refusal of ``settings`` with ``change``, or None when it runs."""
    try:
        check_run(settings.with_changes(**change))
    except ShardscopeError as exc:
        return exc
    return None


def _bound(settings: RunSettings, key: str, probe: int) -> int | None:
    """The value a refusal of ``key`` = ``probe`` names (its "at least"/"at most"), else None."""
    exc = refusal(settings, **{key: probe})
    if exc is None:
        return probe
    return int(exc.value) if isinstance(exc, KnobRefusal) and exc.knob == key else None


def _last_accepted(settings: RunSettings, key: str, low: int, high: int, start: int) -> int:
    """The largest value in ``start``..``high`` that runs, taking the accepted values as one
    run from ``start`` (each knob's minimum grows with it: deeper prefetch, larger shards)."""
    if refusal(settings, **{key: high}) is None:
        return high
    lo, hi = start, high - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if refusal(settings, **{key: mid}) is None else (lo, mid - 1)
    return max(lo, low)


def slider_limits(info: ModelInfo, settings: RunSettings) -> dict[str, SliderLimit]:
    """Each model-dependent slider's range at ``settings``; the budget's floor at the other knobs."""
    settings = settings.with_changes(model_path=info.path)
    name = info.name
    floor = budget_floor_mb(info, settings)
    budget = max(int(settings.budget_mb), floor)  # the value the budget slider will show
    settings = settings.with_changes(budget_mb=budget)
    spec = settings.expert_speculation
    # the top is the window's choice, not the engine's: a profile's larger budget stays as it is
    top = max(1024, math.ceil(info.total_mb * 1.5), floor + 1, budget)
    low_why = f"{floor:,} MiB: the least {name} runs under at these settings" + (
        " (speculation on)" if spec and info.moe is not None else "")
    limits = {"budget_mb": SliderLimit(floor, top, low_why),
              "n_gpu_layers": SliderLimit(0, info.n_layers + 1)}  # +1: the output layer
    experts = info.moe is not None and streams_experts(settings)
    if experts:
        ceiling = int(KNOBS["expert_cache_mb"].high)
        low = _bound(settings.with_changes(trunk_share=0) if hasattr(settings, "trunk_share") else settings,
                     "expert_cache_mb", 1) or 1
        high = _bound(settings, "expert_cache_mb", ceiling)
        high = low - 1 if high is None or high < low else min(high, ceiling)
        limits["expert_cache_mb"] = SliderLimit(
            low, high, f"{low:,} MiB: the least expert cache {name} runs with" + (" (speculation on)" if spec else ""),
            f"{high:,} MiB: the most budget {budget:,} MiB leaves the experts", off_below=True)
    else:
        moe = info.moe
        expert_top = math.ceil(moe.expert_bytes / budget_minimum.MIB) if moe is not None \
            else KNOBS["expert_cache_mb"].slider[1]
        limits["expert_cache_mb"] = SliderLimit(0, expert_top)
    for key in ("prefetch_depth", "shard_mb", "trunk_share"):
        spec_k = KNOBS.get(key)
        if spec_k is None or spec_k.slider is None or not spec_k.enabled:
            continue
        if spec_k.streams == "experts" and not experts:
            continue
        if spec_k.streams == "layers" and experts and not _trunk_streams():
            continue
        k_low, k_high, _ = spec_k.slider
        if key == "shard_mb":
            k_high = max(k_low, min(k_high, math.ceil(info.file_mb)))  # past the file's size plans the same
        current = int(getattr(settings, key))
        if refusal(settings) is not None:  # nothing runs at these settings (e.g. GPU layers asked)
            continue
        high = _last_accepted(settings, key, k_low, k_high, min(max(current, k_low), k_high))
        low = k_low
        if key == "trunk_share" and settings.expert_cache_mb and refusal(settings, trunk_share=k_low + 1):
            high = k_low  # a given expert cache and a share split one budget: the share stays auto
            why = "auto only while the expert cache is set: set the cache to auto to split by share"
        elif high < k_high:
            why = f"{high:,}{(' ' + spec_k.unit) if spec_k.unit else ''}: the most budget {budget:,} MiB holds"
        else:
            why = ""
        limits[key] = SliderLimit(low, high, high_why=why)
    return limits


def _trunk_streams() -> bool:
    """Whether an expert run streams its trunk in shards (the shard and prefetch knobs then apply)."""
    return hasattr(budget_minimum, "trunk_plan_for")


__all__ = ["SliderLimit", "budget_floor_mb", "slider_limits", "refusal"]
