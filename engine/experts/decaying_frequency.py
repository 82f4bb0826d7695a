"""The ``decay`` expert policy's estimate: how soon each (layer, expert) will be picked again.

What it rests on, measured on three real routers' traces (docs/real-traces.md): a layer's
picks drift over a few tokens (a frequency kept since the start, lfu, loses to one that
forgets), the cache must hold units of concentrated layers longer than those of layers that
route near-uniformly, and the layers run in a fixed order, so a unit of a layer already
passed this token is not needed before the next token, while one of a layer still to come
may be needed within a few layer steps.

So each unit keeps one number, its pick count decayed by half every ``HALF_LIFE_TOKENS``
tokens (LRFU's combined recency and frequency), and the time of its last update; its chance
``p`` of being picked at its layer's next pass is that count times (1 − the decay over one
token) (a unit picked at every pass converges to p = 1). The expected wait until its next
use, in layer steps, is the steps until its layer runs again plus a whole token per expected
miss: ``d + L (1/p − 1)``; the cache evicts the longest wait first (Belady's rule with the
future estimated).

Per access only the picked units' numbers change (O(picks)); the order within one layer is
fixed between that layer's passes (all its units decay alike), so an eviction structure can
keep one heap per layer and compare the L heads' waits: O(L + log n), independent of the
number of experts.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

# One constant, chosen on gpt-oss-120b's trace (half-lives 2–16 tried, 4 and 8 within 1.5
# points at both sizes) and checked on Qwen3-30B-A3B and Gemma-4-26B without retuning:
# a router's preferences drift over about this many tokens.
HALF_LIFE_TOKENS = 8.0


class DecayingFrequency:
    def __init__(self, layers: Sequence[int], n_expert_used: int | None = None,
                 half_life_tokens: float = HALF_LIFE_TOKENS):
        self.position = {layer: i for i, layer in enumerate(layers)}  # run order of the layers
        self.n_layers = max(len(self.position), 1)
        self.n_expert_used = n_expert_used
        # decay per layer step (one access): a token is n_layers steps
        self.log_decay = math.log(0.5) / (half_life_tokens * self.n_layers)
        self.token_keep = 1.0 - math.exp(self.log_decay * self.n_layers)  # 1 − decay over a token
        self.score: dict[tuple[int, int], float] = {}  # unit → decayed count at its last update
        self.updated: dict[tuple[int, int], int] = {}  # unit → step of that update
        self.step = 0
        self.current = 0  # position of the layer accessed last

    def picked(self, layer: int, experts: Iterable[int], counts: Mapping[int, int] | None = None) -> None:
        """Layer ``layer``'s pass picked ``experts``; ``counts`` for a prompt pass (tokens per expert)."""
        self.step += 1
        self.current = self.position.get(layer, 0)
        experts = list(experts)
        if counts:
            # a prompt pass: each expert's share of the prompt's tokens is its chance per token
            tokens = (sum(counts.get(e, 1) for e in experts) / self.n_expert_used if self.n_expert_used
                      else max(counts.get(e, 1) for e in experts))
            for e in experts:
                share = min(1.0, counts.get(e, 1) / max(tokens, 1.0))
                self._set((layer, e), self._now((layer, e)) + share / self.token_keep)
            return
        for e in experts:
            self._set((layer, e), self._now((layer, e)) + 1.0)

    def chance(self, unit: tuple[int, int]) -> float:
        """Estimated chance that ``unit`` is picked at its layer's next pass, 0..1."""
        return min(1.0, self._now(unit) * self.token_keep)

    def expected_wait(self, unit: tuple[int, int], chance: float | None = None) -> float:
        """Expected layer steps until ``unit`` is picked again (the eviction key: largest first);
        ``chance`` of a pick at its layer's next pass instead of the decayed count's."""
        steps = (self.position.get(unit[0], 0) - self.current) % self.n_layers or self.n_layers
        p = self.chance(unit) if chance is None else chance
        return math.inf if p <= 0 else steps + self.n_layers * (1.0 / p - 1.0)

    def chance_at_level(self, level: float) -> float:
        """chance() of a unit whose level() is ``level``."""
        return 0.0 if level == -math.inf else min(1.0, math.exp(level + self.log_decay * self.step) * self.token_keep)

    def wait_at(self, layer: int, chance: float) -> float:
        """expected_wait() of a unit of ``layer`` with that chance."""
        steps = (self.position.get(layer, 0) - self.current) % self.n_layers or self.n_layers
        return math.inf if chance <= 0 else steps + self.n_layers * (1.0 / chance - 1.0)

    def level(self, unit: tuple[int, int]) -> float:
        """A unit's decayed count on a log scale that all units share at every step (log of its
        count now, minus the decay since step 0): fixed between the unit's own picks, so a heap
        per layer keeps its order (−inf for a unit never picked)."""
        score = self.score.get(unit)
        if not score:
            return -math.inf
        return math.log(score) - self.log_decay * self.updated[unit]

    def _now(self, unit: tuple[int, int]) -> float:
        score = self.score.get(unit)
        if score is None:
            return 0.0
        return score * math.exp(self.log_decay * (self.step - self.updated[unit]))

    def _set(self, unit: tuple[int, int], value: float) -> None:
        self.score[unit] = value
        self.updated[unit] = self.step


__all__ = ["DecayingFrequency", "HALF_LIFE_TOKENS"]
