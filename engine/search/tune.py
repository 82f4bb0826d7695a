"""Auto-tune: the settings with the highest *projected* device tok/s that fit the device.

What it optimises: each candidate settings is run here (a cold StreamingRun, like
a sweep row) and its measurement is projected onto the device
(:func:`engine.devices.run_projection.projection_for`: the run's bytes read per token on
the device's SSD, its compute on the device's performance cores). A candidate
*fits* when its memory budget and the weights the kernel saw resident during the
run are both within the device's memory budget (app memory limit − KV cache −
compute buffers − runtime, :func:`engine.devices.weight_budget_mb` with the split of
the built-in iPhone profile: 3072 − 256 − 256 − 512 = 2048 MB).

How it searches (not the full grid): **coordinate descent with a result cache, on intervals.**

1. The budget is fixed at the most the device allows (optionally capped with
   ``budget_cap_mb``): with the same other knobs a larger budget never reads more
   per token, so it is not worth runs.
2. Start from the device's built-in tuning profile (profiles/iphone-16-pro-tuned.toml for
   iphone-16-pro), each knob snapped to its nearest candidate value.
3. **Each candidate is measured until its figure's spread is known**: one run, its first
   round cold (the load's reads and first touches: a warm-up, not counted), then warm rounds
   of the same settings, each projected onto the device, until the projected figure's
   interval (engine/search/interval_decision.py: mean ± t · sd / √n) is narrow, or lies wholly
   below the current point's (it cannot win), or ``max_rounds`` is reached (at least ``min_rounds``). A round
   whose host stalled (engine/measure/token_stalls.py, the host's steal) is not counted.
   One cold round ranked the host's noise (issue 48: five expert policies 74.9-86.8, "lfu
   best", while rounds of one setting swung 51-96).
4. One knob at a time (policy, shard size, prefetch depth, threads; the expert knobs for a MoE
   run), every candidate value with the others held. Candidates whose intervals overlap the
   top one's are **tied**: among them the current value stays (the default until something
   clearly beat it), else the default, else the cheapest. A knob that acts only on what is
   read (``streams`` set in engine/knobs/knobs.py) and cannot move the projected figure — its
   candidates project alike with the compute term held at one value, e.g. the expert policy
   while the device is compute-bound — is reported as having **no effect** and not ranked.
   A move also needs a gain of more than ``min_gain``.
5. Repeat passes over all knobs until a whole pass moves nothing (or
   ``max_passes``). Every result is cached by its settings, so no combination is
   measured twice; combinations the engine refuses (budget below the minimum for
   that shard size and depth) are cached as invalid and cost no run.

The result names the best, its interval, its **margin** over the best candidate it is not tied
with, and its **ties**; a saved profile's description records all three.

Measuring is engine/search/tune_rounds.py; the result in words (and the saved profile) is
engine/search/tune_verdict.py.

It measures about (sum of the candidate counts) runs per pass instead of their
product; the price is that it can stop at a point where only changing two knobs
together would help (knobs that interact, e.g. shard size and depth both eat the
budget's room). docs/projection-validation.md compares it with the full grid (bench/studies/tune_vs_grid.py).
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Callable

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import is_finite_number
from shardscope.engine.knobs.knob_ranges import parse_knob
from shardscope.engine.knobs.knobs import EXPERT_KNOBS, KNOBS, LAYER_KNOBS, TUNED, describe
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.search.interval_decision import Interval, choose, cost_key, enough_rounds, interval, no_effect
from shardscope.engine.search.tune_rounds import MAX_ROUNDS, MIN_ROUNDS, TARGET_REL, measure_rounds, round_terms
from shardscope.engine.search.tune_verdict import (
    KnobDecision,
    save_tuned_profile,
    user_profiles_dir,
    verdict_text,
)
from shardscope.engine.stream.streaming_run import RunSummary

__all__ = [
    "TUNE_KNOBS",
    "DEFAULT_CANDIDATES",
    "Evaluation",
    "KnobDecision",
    "TuneResult",
    "searched_grid",
    "auto_tune",
    "default_candidates",
    "device_weight_budget_mb",
    "start_settings",
    "user_profiles_dir",
    "save_tuned_profile",
    "SEARCH_DESCRIPTION",
    "measure_rounds",
    "verdict_text",
]

TUNE_KNOBS = TUNED  # in the order the descent visits them

# Each tuned knob's declared candidates; threads declares none: default_candidates() uses this host's cores.
DEFAULT_CANDIDATES: dict[str, list] = {
    key: parse_knob(KNOBS[key].flag, KNOBS[key].tune, key) for key in TUNED if KNOBS[key].tune
}

SEARCH_DESCRIPTION = (
    "coordinate descent on intervals: budget fixed at the device's memory budget (or the cap); each "
    "candidate is one run, its cold first round left out, then {rounds} warm rounds until its projected "
    "figure's interval is known; from the device's built-in profile, one knob at a time (policy, shard size, "
    "prefetch depth, threads; for a MoE model that streams experts: threads, expert policy, speculation, and "
    "cache sizes if listed) moves to its best candidate only where their intervals do not overlap "
    "(overlapping ones tie: the current or cheaper value stays); a knob that cannot move the projection is "
    "said to have no effect; passes repeat until none moves; results are cached, so no combination runs twice"
)


def default_candidates() -> dict[str, list]:
    cores = os.cpu_count() or 1
    return {**DEFAULT_CANDIDATES, "threads": list(range(1, cores + 1))}




def searched_candidates(cands: dict[str, list], experts: bool, given: dict[str, list]) -> dict[str, list]:
    """Drop default candidates of knobs the run kind ignores (expert knobs for layer streaming and the
    other way round), so no run measures a knob that cannot change it; lists other than the defaults stay."""
    idle = LAYER_KNOBS if experts else EXPERT_KNOBS
    return {k: (v if k in given or k not in idle else v[:1]) for k, v in cands.items()}


def device_weight_budget_mb(device) -> float:
    """The device's memory budget with the overhead split the sizing and the iPhone profile use."""
    from shardscope.engine.devices.devices import weight_budget_mb
    from shardscope.engine.devices.sizing import DEFAULT_OVERHEAD_MB

    return weight_budget_mb(device, **DEFAULT_OVERHEAD_MB)


@dataclass
class Evaluation:
    """One candidate: measured (``rounds``, its warm rounds; ``summary`` the one nearest their
    mean, for the CSV) or refused (``error``)."""

    settings: RunSettings
    summary: RunSummary | None
    error: str | None
    fits: bool = False
    order: int = 0  # 1-based run number, 0 when it cost no run (refused before loading)
    rounds: list = field(default_factory=list)  # the warm rounds' summaries that count
    terms: list = field(default_factory=list)  # per counted round: (ssd_s, dram_s, compute_s, overlapped)
    stalled: int = 0  # rounds left out because the host stalled

    @property
    def interval(self) -> Interval | None:
        """The projected device tok/s over the counted rounds; None for refused, failed or not fitting."""
        if self.summary is None or self.error or not self.fits:
            return None
        return interval([s.projected_ts for s in (self.rounds or [self.summary])])

    @property
    def measured_interval(self) -> Interval | None:
        """This host's measured tok/s over the same rounds."""
        if self.summary is None:
            return None
        return interval([s.avg_ts for s in (self.rounds or [self.summary])])

    @property
    def score(self) -> float:
        """The projected device tok/s (the interval's mean); -inf for refused, failed or not fitting."""
        iv = self.interval
        return iv.mean if iv is not None else -math.inf


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
    decisions: list[KnobDecision] = field(default_factory=list)
    rounds: int = 0  # warm rounds measured over all candidates (cold first rounds not counted)

    @property
    def grid_size(self) -> int:
        return math.prod(len(v) for v in self.candidates.values())

    def ties(self) -> list[Evaluation]:
        """The measured candidates whose interval overlaps the best's: the best is not measured above them."""
        best = self.best.interval if self.best is not None else None
        if best is None:
            return []
        return [e for e in self.evaluations if e is not self.best and e.interval is not None
                and e.interval.overlaps(best)]

    def runner_up(self) -> Evaluation | None:
        """The best measured candidate the best is not tied with."""
        tied = {id(e) for e in self.ties()}
        others = [e for e in self.evaluations if e is not self.best and e.interval is not None and id(e) not in tied]
        return max(others, key=lambda e: e.score, default=None)

    def margin(self) -> float:
        """(best − runner-up) / runner-up on the projected means; NaN when nothing is clearly behind."""
        runner = self.runner_up()
        if self.best is None or runner is None or not runner.score:
            return math.nan
        return (self.best.score - runner.score) / runner.score

    def no_effect_knobs(self) -> list[str]:
        return list(dict.fromkeys(d.knob for d in self.decisions if d.no_effect))


def _snap(value, candidates: list):
    if value in candidates:
        return value
    if isinstance(value, str):
        return candidates[0]
    return min(candidates, key=lambda c: (abs(c - value), c))


def start_settings(device_id: str, base: RunSettings | None = None) -> RunSettings:
    """The device's built-in tuning profile (by its ``device`` key), else ``base``/defaults."""
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


def auto_tune(device_id: str, *, model_path: str | None = None, candidates: dict[str, list] | None = None,
              budget_cap_mb: float | None = None, n_gen: int = 6, n_ctx: int = 128,
              ssd_mb_s: float | None = None, min_gain: float = 0.0, max_passes: int = 6,
              min_rounds: int = MIN_ROUNDS, max_rounds: int = MAX_ROUNDS, target_rel: float = TARGET_REL,
              measure: Callable[[RunSettings], RunSummary | list[RunSummary] | None] | None = None,
              on_eval: Callable[[Evaluation], None] | None = None,
              should_stop: Callable[[], bool] | None = None) -> TuneResult:
    """Coordinate-descent search (module doc) for the best projected tok/s that fits, on intervals.

    ``ssd_mb_s`` is the disk emulated while measuring here (None: the start profile's,
    i.e. the device's SSD; 0: no emulation). ``measure`` replaces the real run (a
    function settings → a RunSummary, or a list of warm rounds' summaries, with the
    projection filled in), e.g. to replay a full grid's results. ``on_eval`` sees every
    evaluation as it is made.
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
    if not 1 <= min_rounds <= max_rounds:
        raise ShardscopeError(f"tune: rounds per candidate must satisfy 1 ≤ min ≤ max, got {min_rounds}, {max_rounds}")

    budget = weight_budget if budget_cap_mb is None else min(weight_budget, budget_cap_mb)
    budget = int(budget) if float(budget).is_integer() else budget
    if measure is None:
        load_layout(resolve_model_path(model_path))  # a bad model file is refused before any run
    # An injected ``measure`` replays a layer-streaming grid.
    experts = measure is None and streams_experts(RunSettings(model_path=model_path, budget_mb=budget))
    cands = searched_grid(cands, experts, candidates or {})
    start = start_settings(device_id)
    start = start.with_changes(
        model_path=model_path, budget_mb=budget, n_gen=n_gen, n_ctx=n_ctx,
        ssd_mb_s=float(start.ssd_mb_s if ssd_mb_s is None else ssd_mb_s),
        **{k: _snap(getattr(start, k), cands[k]) for k in TUNE_KNOBS},
    )
    result = TuneResult(device_id=device.id, weight_budget_mb=weight_budget, budget_mb=budget,
                        candidates={k: cands[k] for k in TUNE_KNOBS}, best=None)
    cache: dict[RunSettings, Evaluation] = {}

    def enough_against(against: Interval | None) -> Callable[[list[RunSummary]], bool]:
        return lambda rounds: enough_rounds([r.projected_ts for r in rounds], against, min_n=min_rounds,
                                            max_n=max_rounds, target_rel=target_rel)

    def run_one(settings: RunSettings, against: Interval | None) -> tuple[list[RunSummary], int] | None:
        if measure is not None:
            got = measure(settings)
            if got is None:
                return None
            return (list(got) if isinstance(got, (list, tuple)) else [got]), 0
        return measure_rounds(settings, device.id, enough_against(against), should_stop)

    def evaluate(settings: RunSettings, against: Interval | None = None) -> Evaluation:
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
                got = run_one(settings, against)
            except ShardscopeError as exc:
                result.runs += 1
                ev = Evaluation(settings, None, str(exc), order=result.runs)
            else:
                if got is None:  # a replayed grid point that the engine refused
                    ev = Evaluation(settings, None, "refused before loading")
                else:
                    rounds, stalled = got
                    result.runs += 1
                    result.rounds += len(rounds)
                    if not rounds:
                        why = ("stopped before a warm round" if stalled == 0
                               else f"the host stalled all {stalled} rounds")
                        ev = Evaluation(settings, None, why, order=result.runs, stalled=stalled)
                    else:
                        mid = statistics.fmean(r.projected_ts for r in rounds) if all(
                            is_finite_number(r.projected_ts) for r in rounds) else math.nan
                        rep = min(rounds, key=lambda r: abs(r.projected_ts - mid)) if math.isfinite(mid) else rounds[-1]
                        terms = [t for t in (round_terms(r, device.id) for r in rounds) if t is not None]
                        fits = all(_fits(settings, r, weight_budget) for r in rounds)
                        ev = Evaluation(settings, rep, None, fits, order=result.runs, rounds=rounds, terms=terms,
                                        stalled=stalled)
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
    result.path.append(f"start {knobs_text(start)}: {score_text(current)}")
    while result.passes < max_passes and not stop():
        result.passes += 1
        moved = False
        for knob in TUNE_KNOBS:
            if len(cands[knob]) < 2:
                continue
            here = {getattr(current.settings, knob): current}
            for value in cands[knob]:
                if value in here or stop():
                    continue
                here[value] = evaluate(current.settings.with_changes(**{knob: value}), current.interval)
            if stop():
                break
            held = getattr(current.settings, knob)
            ran = {v: e.interval for v, e in here.items() if e.interval is not None}
            spec = KNOBS[knob]
            choice = choose(ran, keep=held, default=getattr(start, knob),
                            cost={v: cost_key(v, spec.choices) for v in ran})
            idle = bool(spec.streams) and no_effect({v: here[v].terms for v in ran if here[v].terms})
            if choice is None or idle:
                result.decisions.append(KnobDecision(knob, result.passes, choice, no_effect=idle))
                continue
            pick = here[choice.pick]
            go = choice.pick != held and (current.interval is None or _beats(pick.score, current.score, min_gain))
            result.decisions.append(KnobDecision(knob, result.passes, choice, moved=go))
            if go:
                result.path.append(f"pass {result.passes}: {knob} {spec.text(held)} → {spec.text(choice.pick)}: "
                                   f"{score_text(pick)}")
                current = pick
                moved = True
        if not moved:
            break
    # The descent's point: every knob at its clear best or, among ties, at the kept value.
    result.best = current if current.interval is not None else max(
        (e for e in cache.values() if e.interval is not None), key=lambda e: e.score, default=None)
    return result


def searched_grid(cands: dict[str, list], experts: bool, given: dict[str, list]) -> dict[str, list]:
    """The lists the descent searches: ``searched_candidates`` with ``given`` the lists that differ
    from the declared defaults (so the counts printed before a tune are the grid it searches)."""
    changed = {k: v for k, v in given.items() if v != DEFAULT_CANDIDATES.get(k)}
    return searched_candidates(cands, experts, changed)


def _beats(new: float, old: float, min_gain: float) -> bool:
    if not math.isfinite(new):
        return False
    if not math.isfinite(old):
        return True
    return new > old * (1 + min_gain)


def knobs_text(s: RunSettings) -> str:
    return describe(s, (*TUNED, "budget_mb"))


def score_text(ev: Evaluation) -> str:
    if ev.summary is None:
        return f"refused ({ev.error})"
    fit = "" if ev.fits else ", does not fit"
    iv, here = ev.interval, ev.measured_interval
    projected = iv.text() if iv is not None else f"{ev.summary.projected_ts:.3g}"
    stalled = f"; {ev.stalled} round(s) left out: the host stalled" if ev.stalled else ""
    return (f"projected {projected} tok/s ({ev.summary.projected_bound}-bound), "
            f"measured {here.text() if here is not None else '?'} tok/s here{fit}{stalled}")
