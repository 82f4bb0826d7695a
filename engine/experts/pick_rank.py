"""How often a layer's picks at one router rank come back at that layer's next pass.

The router hands over a layer's picks in its own order (llama.cpp's top-k: by router weight,
the best first; its CPU kernel swaps the first two, which a per-slot rate does not mind). Per
layer, for each slot i of the last decoded pass, the share of passes whose next pass picked
that slot's expert again: the ``rank`` order (expert_cache.py) mixes it into decay's chance
for the units the layer's last pass picked. Counts start at one half of one (no knowledge),
and only decoded passes count (a prompt pass's union has no order). O(k) per pass.

Where the order says nothing (a router whose ids come sorted by id, say), every slot's rate
is the layer's plain repeat rate; ``auto`` then follows whichever candidate hits more.
"""

from __future__ import annotations

from typing import Iterable, Sequence


class PickRank:
    def __init__(self, layers: Sequence[int], n_expert_used: int | None):
        k = max(int(n_expert_used or 1), 1)
        self.rates = {layer: [[0.5, 1.0] for _ in range(k)] for layer in layers}  # slot → [came back, seen]
        # layer → {expert: slot} of its last pass
        self.rank: dict[int, dict[int, int]] = {layer: {} for layer in layers}
        self.repeat_by_slot = {layer: [0.5] * k for layer in layers}  # layer → each slot's rate
        self.passes = {layer: 0 for layer in layers}  # decoded passes of each layer so far
        self.lowest = {layer: 0.25 for layer in layers}  # layer → half its lowest slot rate: the floor of
        # a last pick's mixed chance (below it, a unit cannot outwait a unit of the last picks)

    def picked(self, layer: int, experts: Iterable[int], prompt: bool) -> None:
        if prompt or layer not in self.rates:
            return
        experts = list(experts)
        self.passes[layer] += 1
        rates, picked = self.rates[layer], set(experts)
        for expert, slot in self.rank[layer].items():
            rates[slot][1] += 1.0
            if expert in picked:
                rates[slot][0] += 1.0
        self.rank[layer] = {e: i for i, e in enumerate(experts[:len(rates)])}
        self.repeat_by_slot[layer] = [came_back / seen for came_back, seen in rates]
        self.lowest[layer] = 0.5 * min(self.repeat_by_slot[layer])

    def repeat(self, unit: tuple[int, int]) -> float | None:
        """The chance that ``unit`` comes back at its layer's next pass by its slot at the last
        pass, or None if that pass did not pick it."""
        slot = self.rank.get(unit[0], {}).get(unit[1])
        if slot is None:
            return None
        return self.repeat_by_slot[unit[0]][slot]


__all__ = ["PickRank"]
