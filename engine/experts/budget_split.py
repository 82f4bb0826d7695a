"""Where one budget goes between an expert run's trunk and its expert cache: the split knob
(``trunk_share``) turned into bytes, the engine's default and auto's choice between rounds.

The minimum it splits above is engine/layout/budget_minimum.py's one definition; the split lives
here, above the knobs, because a split that cannot be met is refused by naming its knob
(KnobRefusal), worded for the CLI or the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.knob_refusal import KnobRefusal
from shardscope.engine.layout.budget_minimum import Minimum, moe_minimum, whole_mb

if TYPE_CHECKING:
    from shardscope.engine.layout.moe_layout import MoeLayout
    from shardscope.engine.layout.shard_plan import ShardPlan

TRUNK_GAIN = 1.0  # MiB re-read per token saved per MiB of trunk kept: every trunk byte is read every token


def expert_gain(moe: MoeLayout, pick_shares: list[float] | None = None) -> float:
    """MiB re-read per token saved by the first MiB of expert cache past the step's picks: the
    chance that the most-picked expert is picked again at the next token. Without routing,
    uniform (k of n); with ``pick_shares`` (each expert's picks per token, replayed or measured),
    the largest of them."""
    if pick_shares:
        return min(1.0, max(pick_shares))
    return moe.n_expert_used / moe.n_expert


def default_trunk_share(moe: MoeLayout, pick_shares: list[float] | None = None) -> int:
    """The split the engine chooses (percent of the room above the minimum to the trunk): the
    side whose MiB saves more re-reads per token gets the room first. A trunk byte not resident
    is read every token; an expert byte cached saves a read only when its expert is picked, at
    most once a token, so the trunk wins unless an expert is picked at every token (a tie: the
    trunk's reads are the larger, sequential ones) — docs/decisions.md measures it."""
    return 100 if TRUNK_GAIN >= expert_gain(moe, pick_shares) else 1


@dataclass(frozen=True)
class BudgetSplit:
    """Where one budget goes: globals, the trunk (window and pinned layers), the expert cache."""

    minimum: Minimum
    budget_bytes: int
    trunk_total: int  # every trunk byte a shard holds
    trunk_bytes: int  # what the trunk's shards may hold (its window included)
    cache_bytes: int  # the expert cache (the step's picks included)
    share: int  # percent of the room above the minimum given to the trunk
    chosen: bool  # True: the engine chose the share (trunk_share 0 = auto)

    @property
    def trunk_streams(self) -> bool:
        return self.trunk_bytes < self.trunk_total

    def text(self) -> str:
        how = "the engine's choice" if self.chosen else "given"
        return (f"trunk {self.trunk_bytes / MIB:.1f} of {self.trunk_total / MIB:.1f} MiB"
                f"{' (streams)' if self.trunk_streams else ' (resident)'} + expert cache "
                f"{self.cache_bytes / MIB:.1f} MiB + globals {self.minimum.globals_bytes / MIB:.1f} MiB; "
                f"trunk share {self.share} % of the room above the minimum ({how})")


def split_budget(moe: MoeLayout, trunk: ShardPlan | None, settings, pick_shares: list[float] | None = None,
                 auto_share: int | None = None) -> BudgetSplit:
    """The split of ``settings.budget_mb``, or a one-line refusal naming the knob that is too small
    or too large (KnobRefusal: the CLI names the flag, the window the slider)."""
    name = Path(moe.path).name
    minimum = moe_minimum(moe, trunk, settings.prefetch_depth, settings.expert_speculation)
    budget = int(settings.budget_mb * MIB)
    if budget < minimum.bytes:
        raise KnobRefusal(f"budget {settings.budget_mb:g} MiB is below the minimum for {name}; the minimum is "
                          f"{minimum.mb} MiB ({minimum.parts()})", "budget_mb", minimum.mb)
    trunk_total = trunk.streamable_bytes if trunk is not None else 0
    room = budget - minimum.bytes
    given_cache = int(settings.expert_cache_mb * MIB)
    share = settings.trunk_share or auto_share or default_trunk_share(moe, pick_shares)
    if given_cache:
        if settings.trunk_share:
            raise KnobRefusal(f"is given with --trunk-share {settings.trunk_share}; the two split one budget, give "
                              f"one of them", "expert_cache_mb", 0, "at most", given=settings.expert_cache_mb)
        if given_cache < minimum.picks_bytes:
            raise KnobRefusal(f"below the minimum expert cache of {name}, {whole_mb(minimum.picks_bytes)} MiB "
                              f"({minimum.parts()})", "expert_cache_mb", whole_mb(minimum.picks_bytes),
                              given=settings.expert_cache_mb)
        most = budget - minimum.globals_bytes - minimum.window_bytes
        if given_cache > most:
            raise KnobRefusal(f"exceeds what the budget of {settings.budget_mb:g} MiB leaves {name}'s experts "
                              f"({minimum.parts()})", "expert_cache_mb", max(0, most // MIB), "at most",
                              given=settings.expert_cache_mb)
        trunk_bytes = min(trunk_total, budget - minimum.globals_bytes - given_cache)
        share = round(100 * (trunk_bytes - minimum.window_bytes) / room) if room else 100
        return BudgetSplit(minimum, budget, trunk_total, trunk_bytes, given_cache, share, False)
    extra = min(trunk_total - minimum.window_bytes, room * share // 100)
    trunk_bytes = minimum.window_bytes + extra
    cache = budget - minimum.globals_bytes - trunk_bytes
    return BudgetSplit(minimum, budget, trunk_total, trunk_bytes, cache, share, not settings.trunk_share)


CANDIDATE_SHARES = (100, 75, 50, 25, 1)  # what auto weighs, the trunk first (it wins a tie)


def trunk_read_bytes(split: BudgetSplit) -> int:
    """Trunk bytes read again per token under ``split``: all but its pinned layers (what it holds
    beyond its window), none when it holds every byte."""
    if not split.trunk_streams:
        return 0
    return split.trunk_total - max(0, split.trunk_bytes - split.minimum.window_bytes)


def choose_trunk_share(moe: MoeLayout, trunk: ShardPlan, settings, expert_mib_at, trunk_s_per_mib: float,
                       expert_s_per_mib: float) -> int:
    """The share (of CANDIDATE_SHARES) whose split costs a token the least time re-reading weights:
    trunk MiB re-read x what a trunk MiB cost the decode, plus the expert MiB missed at that split's
    cache (``expert_mib_at(cache_bytes)``: a replay of the run's own routing) x what an expert MiB
    cost it. Both costs are the run's measured waits per MiB read, so a side read in small requests
    (a latent MoE's experts of tens of kB) weighs what it really costs, not only its bytes."""
    best: tuple[float, int] | None = None
    for share in CANDIDATE_SHARES:
        split = split_budget(moe, trunk, settings.with_changes(trunk_share=share, expert_cache_mb=0))
        cost = trunk_read_bytes(split) / MIB * trunk_s_per_mib + expert_mib_at(split.cache_bytes) * expert_s_per_mib
        if best is None or cost < best[0] * (1 - 1e-9):
            best = (cost, share)
    return best[1]


__all__ = ["CANDIDATE_SHARES", "trunk_read_bytes", "choose_trunk_share", "Minimum", "BudgetSplit", "moe_minimum",
           "split_budget", "default_trunk_share", "expert_gain", "whole_mb"]
