"""What the expert map draws, as one immutable copy: the window polls it at ~10 Hz.

States use widgets/shard_map.py's codes so both maps read alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EVICTED, LOADING, RESIDENT, PINNED = 0, 1, 2, 3


@dataclass(frozen=True)
class ExpertView:
    states: np.ndarray  # uint8 [n_layers, n_expert]: 0 evicted, 1 loading, 2 resident, 3 pinned
    picked: np.ndarray  # bool [n_layers, n_expert]: the current token's picks
    heat: np.ndarray  # int [n_layers, n_expert]: picks over the last ``window`` decoded tokens
    window: int  # decoded tokens ``heat`` counts over
    current_layer: int | None  # row of the layer whose router picked last (None before any)
    layers: tuple[int, ...] = ()  # the model's layer number of each row (MoE layers only)


__all__ = ["ExpertView", "EVICTED", "LOADING", "RESIDENT", "PINNED"]
