"""Auto-tune: the settings with the highest *projected* device tok/s that fit the device.

What it optimises: each candidate settings is run here (a cold StreamingRun, like
a sweep row) and its measurement is projected onto the device
(:func:`engine.run_projection.projection_for`: the run's bytes read per token on
the device's SSD, its compute on the device's performance cores). A candidate
*fits* when its weight budget and the weights the kernel saw resident during the
run are both within the device's weight budget (app memory limit − KV cache −
compute buffers − runtime, :func:`engine.devices.weight_budget_mb` with the split of
the built-in iPhone profile: 3072 − 256 − 256 − 512 = 2048 MB).

How it searches (not the full grid): **coordinate descent with a result cache.**

1. The budget is fixed at the most the device allows (optionally capped with
   ``budget_cap_mb``): with the same other knobs a larger budget never reads more
   per token, so it is not worth runs.
2. Start from the device's built-in run profile (profiles/iphone-16-pro.toml for
   iphone-16-pro), each knob snapped to its nearest candidate value.
3. One knob at a time (policy, shard size, prefetch depth, threads), run every
   candidate value of that knob with the others held, and move to the best one if
   it beats the current point by more than ``min_gain`` (2 %: below that it is the
   host's noise, not the knob).
4. Repeat passes over all knobs until a whole pass moves nothing (or
   ``max_passes``). Every result is cached by its settings, so no combination is
   measured twice; combinations the engine refuses (budget below the minimum for
   that shard size and depth) are cached as invalid and cost no run.

It measures about (sum of the candidate counts) runs per pass instead of their
product; the price is that it can stop at a point where only changing two knobs
together would help (knobs that interact, e.g. shard size and depth both eat the
budget's room). docs/projection-validation.md compares it with the full grid (bench/tune_vs_grid.py).
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import is_finite_number
from shardscope.engine.knobs.knob_ranges import parse_knob
from shardscope.engine.knobs.knobs import EXPERT_KNOBS, KNOBS, LAYER_KNOBS, TUNED, describe
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.stream.streaming_run import RunSummary

__all__ = [
    "TUNE_KNOBS",
    "DEFAULT_CANDIDATES",
    "Evaluation",
    "TuneResult",
    "auto_tune",
    "default_candidates",
    "device_weight_budget_mb",
    "start_settings",
    "user_profiles_dir",
    "save_tuned_profile",
    "SEARCH_DESCRIPTION",
]

TUNE_KNOBS = TUNED  # in the order the descent visits them

# Each tuned knob's declared candidates; threads declares none: default_candidates() uses this host's cores.
DEFAULT_CANDIDATES: dict[str, list] = {
    key: parse_knob(KNOBS[key].flag, KNOBS[key].tune, key) for key in TUNED if KNOBS[key].tune
}

SEARCH_DESCRIPTION = (
    "coordinate descent: budget fixed at the device's weight budget (or the cap); from the device's "
    "built-in profile, one knob at a time (policy, shard size, prefetch depth, threads; for a MoE model that "
    "streams experts: threads, expert policy, speculation, and cache sizes if listed) moves to its best "
    "candidate if that beats the current point by more than {gain:.0%}; passes repeat until none moves; "
    "results are cached, so no combination runs twice"
)


def default_candidates() -> dict[str, list]:
    cores = os.cpu_count() or 1
    return {**DEFAULT_CANDIDATES, "threads": list(range(1, cores + 1))}




def searched_candidates(cands: dict[str, list], experts: bool, given: dict[str, list]) -> dict[str, list]:
    """Drop default candidates of knobs the run kind ignores (expert knobs for layer streaming and the
    other way round), so no run measures a knob that cannot change it; lists other than the defaults stay."""
    idle = LAYER_KNOBS if experts else EXPERT_KNOBS
    return {k: (v if k in given or k not in idle else v[:1]) for k, v in cands.items()}


def user_profiles_dir() -> Path:
    """Where user profiles live; the same folder the window lists (engine.user_dirs)."""
    from shardscope.engine.base.user_dirs import profiles_dir

    return profiles_dir()


def device_weight_budget_mb(device) -> float:
    """The device's weight budget with the overhead split the sizing and the iPhone profile use."""
    from shardscope.engine.devices.devices import weight_budget_mb
    from shardscope.engine.devices.sizing import DEFAULT_OVERHEAD_MB

    return weight_budget_mb(device, **DEFAULT_OVERHEAD_MB)


@dataclass
class Evaluation:
    """One candidate: measured (``summary``) or refused (``error``)."""

    settings: RunSettings
    summary: RunSummary | None
    error: str | None
    fits: bool = False
    order: int = 0  # 1-based run number, 0 when it cost no run (refused before loading)

    @property
    def score(self) -> float:
        """Projected device tok/s; -inf for refused, failed or not fitting candidates."""
        if self.summary is None or self.error or not self.fits:
            return -math.inf
        value = self.summary.projected_ts
        return value if is_finite_number(value) else -math.inf


@dataclass
class TuneResult:
    device_id: str
    weight_budget_mb: float
    budget_mb: float
    candidates: dict[str, list]
    best: Evaluation | None
    evaluations: list[Evaluation] = field(default_factory=list)
    runs: int = 0  # candidates actually run (refused ones cost nothing)
    refused: int = 0
    passes: int = 0
    stopped: bool = False
    path: list[str] = field(default_factory=list)  # one line per move, for the output

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.candidates.values())


def _snap(value, candidates: list):
    if value in candidates:
        return value
    if isinstance(value, str):
        return candidates[0]
    return min(candidates, key=lambda c: (abs(c - value), c))


def start_settings(device_id: str, base: RunSettings | None = None) -> RunSettings:
    """The device's built-in run profile (by its ``device`` key), else ``base``/defaults."""
    from shardscope.engine.knobs.profile_file import list_profiles

    profiles, _ = list_profiles(None)
    for profile in profiles:
        if profile.builtin and profile.device == device_id:
            return profile.settings
    return base or RunSettings()


def _fits(settings: RunSettings, summary: RunSummary, weight_budget: float) -> bool:
    resident = summary.resident_weights_mb
    measured = is_finite_number(resident)
    kernel_ok = not measured or resident <= weight_budget  # NaN: no sample while generating
    return settings.budget_mb <= weight_budget and kernel_ok


def _measure_run(settings: RunSettings, device_id: str) -> RunSummary:
    from shardscope.engine.runs.bench_command import run_bench

    summary, _ = run_bench(settings, device=device_id)
    return summary


def auto_tune(device_id: str, *, model_path: str | None = None, candidates: dict[str, list] | None = None,
              budget_cap_mb: float | None = None, n_gen: int = 6, n_ctx: int = 128,
              ssd_mb_s: float | None = None, min_gain: float = 0.02, max_passes: int = 6,
              measure: Callable[[RunSettings], RunSummary] | None = None,
              on_eval: Callable[[Evaluation], None] | None = None,
              should_stop: Callable[[], bool] | None = None) -> TuneResult:
    """Coordinate-descent search (module doc) for the best projected tok/s that fits.

    ``ssd_mb_s`` is the disk emulated while measuring here (None: the start profile's,
    i.e. the device's SSD; 0: no emulation). ``measure`` replaces the real run (a
    function settings → RunSummary with the projection filled in), e.g. to replay a
    full grid's results. ``on_eval`` sees every evaluation as it is made.
    """
    from shardscope.engine.base.bundled_model import resolve_model_path
    from shardscope.engine.devices.devices import get_device
    from shardscope.engine.layout.layout_cache import load_layout
    from shardscope.engine.runs.run_factory import check_run, streams_experts

    device = get_device(device_id)
    weight_budget = device_weight_budget_mb(device)
    cands = {k: list(v) for k, v in (candidates or default_candidates()).items()}
    for key in TUNE_KNOBS:
        cands.setdefault(key, default_candidates()[key])
        if not cands[key]:
            raise ShardscopeError(f"tune: no candidate values for {key}")
    unknown = set(cands) - set(TUNE_KNOBS)
    if unknown:
        raise ShardscopeError(f"tune: cannot tune {sorted(unknown)[0]!r} (knobs: {', '.join(TUNE_KNOBS)})")
    if budget_cap_mb is not None and not budget_cap_mb > 0:
        raise ShardscopeError(f"tune: --budget-cap-mb must be > 0, got {budget_cap_mb:g}")
    if not 0 <= min_gain < 1:
        raise ShardscopeError(f"tune: min_gain must be between 0 and 1, got {min_gain:g}")

    budget = weight_budget if budget_cap_mb is None else min(weight_budget, budget_cap_mb)
    budget = int(budget) if float(budget).is_integer() else budget
    if measure is None:
        load_layout(resolve_model_path(model_path))  # a bad model file is refused before any run
    # An injected ``measure`` replays a layer-streaming grid.
    experts = measure is None and streams_experts(RunSettings(model_path=model_path, budget_mb=budget))
    given = {k: v for k, v in (candidates or {}).items() if v != DEFAULT_CANDIDATES.get(k)}
    cands = searched_candidates(cands, experts, given)
    start = start_settings(device_id)
    start = start.with_changes(
        model_path=model_path, budget_mb=budget, n_gen=n_gen, n_ctx=n_ctx,
        ssd_mb_s=float(start.ssd_mb_s if ssd_mb_s is None else ssd_mb_s),
        **{k: _snap(getattr(start, k), cands[k]) for k in TUNE_KNOBS},
    )
    result = TuneResult(device_id=device.id, weight_budget_mb=weight_budget, budget_mb=budget,
                        candidates={k: cands[k] for k in TUNE_KNOBS}, best=None)
    cache: dict[RunSettings, Evaluation] = {}

    run_one = measure or (lambda s: _measure_run(s, device.id))

    def evaluate(settings: RunSettings) -> Evaluation:
        if settings in cache:
            return cache[settings]
        ev = None
        if measure is None:
            try:
                check_run(settings)  # refused combinations cost no run
            except ShardscopeError as exc:
                ev = Evaluation(settings, None, str(exc))
        if ev is None:
            try:
                summary = run_one(settings)
            except ShardscopeError as exc:
                result.runs += 1
                ev = Evaluation(settings, None, str(exc), order=result.runs)
            else:
                if summary is None:  # a replayed grid point that the engine refused
                    ev = Evaluation(settings, None, "refused before loading")
                else:
                    result.runs += 1
                    ev = Evaluation(settings, summary, None, _fits(settings, summary, weight_budget),
                                    order=result.runs)
        if ev.summary is None and ev.order == 0:
            result.refused += 1
        cache[settings] = ev
        result.evaluations.append(ev)
        if on_eval:
            on_eval(ev)
        return ev

    def stop() -> bool:
        if should_stop and should_stop():
            result.stopped = True
        return result.stopped

    current = evaluate(start)
    result.path.append(f"start {_knobs_text(start)}: {_score_text(current)}")
    while result.passes < max_passes and not stop():
        result.passes += 1
        moved = False
        for knob in TUNE_KNOBS:
            best_here = current
            for value in cands[knob]:
                if value == getattr(current.settings, knob) or stop():
                    continue
                ev = evaluate(current.settings.with_changes(**{knob: value}))
                if ev.score > best_here.score:
                    best_here = ev
            if best_here is not current and _beats(best_here.score, current.score, min_gain):
                result.path.append(f"pass {result.passes}: {knob} {getattr(current.settings, knob)} → "
                                   f"{getattr(best_here.settings, knob)}: {_score_text(best_here)}")
                current = best_here
                moved = True
            if stop():
                break
        if not moved:
            break
    valid = [e for e in cache.values() if math.isfinite(e.score)]
    # The best point measured: the descent's, unless a candidate beat it by less than min_gain.
    result.best = max(valid, key=lambda e: e.score, default=None)
    return result


def _beats(new: float, old: float, min_gain: float) -> bool:
    if not math.isfinite(new):
        return False
    if not math.isfinite(old):
        return True
    return new > old * (1 + min_gain)


def _knobs_text(s: RunSettings) -> str:
    return describe(s, (*TUNED, "budget_mb"))


def _score_text(ev: Evaluation) -> str:
    if ev.summary is None:
        return f"refused ({ev.error})"
    fit = "" if ev.fits else ", does not fit"
    return (f"projected {ev.summary.projected_ts:.3g} tok/s ({ev.summary.projected_bound}-bound), "
            f"measured {ev.summary.avg_ts:.3g} tok/s{fit}")


def tuned_profile_path(name: str, directory: str | os.PathLike | None = None, *, force: bool = False) -> Path:
    """Where ``--save-profile NAME`` writes; an existing profile is refused unless ``force``
    (checked before the search, so a tune is never run only to be refused at the end)."""
    from shardscope.engine.knobs.profile_file import profile_filename

    if not isinstance(name, str) or not name.strip():
        raise ShardscopeError("--save-profile: the profile name must not be empty")
    folder = Path(directory) if directory is not None else user_profiles_dir()
    path = folder / profile_filename(name)
    if path.exists() and not force:
        raise ShardscopeError(f"--save-profile {name}: {path} already exists; pass --force to replace it")
    if folder.exists() and not (folder.is_dir() and os.access(folder, os.W_OK)):
        raise ShardscopeError(f"--save-profile {name}: cannot write into {folder}")
    return path


def save_tuned_profile(result: TuneResult, name: str, *, directory: str | os.PathLike | None = None,
                       model_path: str | None = None, force: bool = True) -> Path:
    """Write the best settings as a user profile; returns its path.

    The profile keeps the tuned knobs and budget; the measuring-only settings (a few
    tokens, the small context) go back to the defaults so the profile runs normally.
    """
    from shardscope.engine.knobs.profile_file import Profile, save_profile

    if result.best is None or result.best.summary is None:
        raise ShardscopeError("tune: no candidate ran and fit the device; nothing to save")
    best = result.best
    d = RunSettings()
    settings = best.settings.with_changes(
        model_path=model_path, n_gen=d.n_gen, n_ctx=d.n_ctx, prompt=d.prompt, temperature=d.temperature,
        seed=d.seed, budget_mb=int(round(best.settings.budget_mb)), shard_mb=int(round(best.settings.shard_mb)),
    )
    s = best.summary
    description = (
        f"Auto-tuned {_dt.date.today().isoformat()} for {result.device_id} on {s.model_filename}: projected "
        f"{s.projected_ts:.3g} tok/s ({s.projected_bound}-bound), measured {s.avg_ts:.3g} tok/s on the tuning "
        f"host; coordinate descent, {result.runs} runs of a {result.grid_size}-point grid."
    )
    path = tuned_profile_path(name, directory, force=force)
    save_profile(Profile(name=name.strip(), settings=settings, description=description, device=result.device_id),
                 path)
    return path
