"""A stand-in for ExpertRun.expert_view at any size: the GUI benches measure the expert map
at Kimi-class size (61 x 384) without a model that big."""

from __future__ import annotations

import itertools
import time

import numpy as np

from shardscope.engine.experts.expert_view import ExpertView


class FakeExpertViews:
    """Callable like the worker's ``expert_view``: a new view every ``period_s`` (states
    drift, ``used`` picks per layer shown loading, heat accumulates), the same one between."""

    def __init__(self, n_layers: int = 61, n_expert: int = 384, used: int = 8, period_s: float = 0.1,
                 seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.shape, self.used, self.period_s = (n_layers, n_expert), used, period_s
        self.states = self.rng.choice(np.array([0, 2], np.uint8), size=self.shape, p=[0.7, 0.3])
        self.heat = np.zeros(self.shape, np.int64)
        self.layers = itertools.cycle(range(n_layers))
        self.changes = 0
        self._t = time.perf_counter()
        self._view = self._next()

    def _next(self) -> ExpertView:
        picks = np.argsort(self.rng.random(self.shape), axis=1)[:, :self.used]
        picked = np.zeros(self.shape, bool)
        np.put_along_axis(picked, picks, True, axis=1)
        self.heat += picked
        flip = self.rng.random(self.shape) < 0.02
        self.states = np.where(flip, np.where(self.states == 2, 0, 2), self.states).astype(np.uint8)
        self.states[picked] = 1
        self.changes += 1
        return ExpertView(self.states.copy(), picked, self.heat.copy(), 64, next(self.layers))

    def __call__(self) -> ExpertView:
        now = time.perf_counter()
        if now - self._t >= self.period_s:
            self._t, self._view = now, self._next()
        return self._view
