"""Search lists that all run: the sweep's and auto-tune's prefilled values, cut to the
combinations the engine accepts on the open model and budget, and what Start will cost.

The engine refuses a combination before loading when the budget is below its minimum
(globals + the largest layer + the prefetched shards, for a layer-streaming run; the
expert cache's floor for an expert-streaming one). ``engine_refusal`` is the one call
to that check — the same ``check_run`` the sweep and auto-tune loops make before each
run — so a prefilled list never holds a combination the search would then skip; the
minimum's home may move, this adapter is the one line to repoint.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knobs import EXPERT_KNOBS, KNOBS, LAYER_KNOBS
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.measure.progress_words import clock


def engine_refusal(settings: RunSettings) -> str | None:
    """The engine's reason for refusing ``settings`` before loading, or None if it would run."""
    from shardscope.engine.runs.run_factory import check_run

    try:
        check_run(settings)
    except ShardscopeError as exc:
        return str(exc)
    return None


def idle_knobs(settings: RunSettings) -> tuple[str, ...]:
    """The knobs the run ``settings`` opens does not read: the expert knobs for a layer-streaming
    run (a dense model, or an MoE that fits its budget), the layer knobs (shard size, prefetch
    depth, policy) for an expert-streaming one — the knobs the window greys. A search varying
    them measures the same run again and again."""
    from shardscope.engine.runs.run_factory import streams_experts

    try:
        experts = streams_experts(settings)
    except (ShardscopeError, OSError):
        experts = False
    return LAYER_KNOBS if experts else EXPERT_KNOBS


def idle_reason(settings: RunSettings) -> str:
    """Why ``idle_knobs`` are idle, as a field's tooltip."""
    if idle_knobs(settings) == LAYER_KNOBS:
        return ("The model's experts stream (it is larger than the budget): there are no shards, "
                "so this knob changes nothing.")
    return ("A layer-streaming run (a dense model, or an MoE that fits the budget) has no expert cache: "
            "this knob changes nothing.")


def combinations(base: RunSettings, grid: dict[str, list]) -> list[RunSettings]:
    keys = list(grid)
    return list(dict.fromkeys(base.with_changes(**dict(zip(keys, values)))
                              for values in itertools.product(*(grid[k] for k in keys))))


def halved(values: list, key: str) -> list | None:
    """A size knob's list one step smaller (16,32,64 → 8,16,32); None when it cannot shrink
    (a value would pass the knob's lower bound, or nothing changes)."""
    spec = KNOBS[key]
    out = list(dict.fromkeys(spec.type(v / 2) if spec.type is int else v / 2 for v in values))
    if out == values or (spec.low is not None and min(out) < spec.low) or (spec.type is int and min(out) < 1):
        return None
    return out


def runnable_grid(base: RunSettings, grid: dict[str, list],
                  refusal: Callable[[RunSettings], str | None] = engine_refusal) -> dict[str, list]:
    """``grid`` changed until every combination runs on ``base``, keeping as many runs as it can.

    First the size knobs (shard size, expert cache: a unit of MB; not the budget, which is
    the point of the sweep's floor) are halved as a whole, step by step (16,32,64 → 8,16,32 →
    4,8,16 …): on a small model under a small budget a proposal sized for larger models
    keeps its shape. If no halving runs throughout, values are dropped: each step drops the
    one value that appears in the most refused combinations (a tie: the later value of its
    list; the lists run small to large, and large shards and deep prefetch are what a small
    budget refuses). A knob keeps at least one value;
    if one value each still fails, the knobs fall back to ``base``'s own values.
    """
    grid = {k: list(v) for k, v in grid.items()}
    refused_cache: dict[RunSettings, bool] = {}

    def refused(s: RunSettings) -> bool:
        if s not in refused_cache:
            refused_cache[s] = refusal(s) is not None
        return refused_cache[s]

    sizes = [k for k in grid if KNOBS[k].unit in ("MB", "MiB") and k != "budget_mb" and KNOBS[k].type in (int, float)]
    step = grid
    while True:
        if not any(refused(s) for s in combinations(base, step)):
            return step
        smaller = {k: halved(v, k) if k in sizes else v for k, v in step.items()}
        if all(smaller[k] is None or smaller[k] == step[k] for k in sizes):
            break
        step = {k: v if v is not None else step[k] for k, v in smaller.items()}
    while True:
        bad = [s for s in combinations(base, grid) if refused(s)]
        if not bad:
            return grid
        counts: Counter = Counter()
        for s in bad:
            for key, values in grid.items():
                if len(values) > 1:
                    counts[(key, values.index(getattr(s, key)))] += 1
        if not counts:
            return {k: [getattr(base, k)] for k in grid}
        key, index = max(counts, key=lambda ki: (counts[ki], ki[1]))
        del grid[key][index]


def seconds_per_run(n_gen: int, last_round) -> float | None:
    """One cold run of ``n_gen`` tokens, from the window's last complete round: its time to
    the first token plus the rest at its tok/s. None before any round has run."""
    if last_round is None or not last_round.avg_ts > 0:
        return None
    return last_round.ttft_ms / 1000 + max(0, n_gen - 1) / last_round.avg_ts


def cost_text(runs: int, n_gen: int, last_round, what: str = "runs", warm_rounds: int = 0) -> str:
    """"9 runs of 8 tokens, about 0:41 (from the last round: TTFT 1,210 ms, 25.3 tok/s)"; with
    ``warm_rounds`` each run is a cold round and up to that many warm ones (the searches' intervals),
    and the time is for all of them."""
    rounds = 1 + max(0, warm_rounds)
    head = f"{runs} {what} of {n_gen} tokens" + (
        f" (each a cold round and up to {warm_rounds} warm ones: {runs * rounds} rounds at most)"
        if warm_rounds else "")
    per_run = seconds_per_run(n_gen, last_round)
    if per_run is None:
        return f"{head}; press Run once for a time estimate (it is taken from the last complete round)"
    return (f"{head}, about {clock(runs * rounds * per_run)} (each round {per_run:.1f} s from the last complete "
            f"round: TTFT {last_round.ttft_ms:,.0f} ms, {last_round.avg_ts:.3g} tok/s; a cold load adds to each run)")
