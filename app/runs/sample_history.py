"""The session's samples for export and for a pinned round's faint curves, kept as numbers.

A MetricsSample object with its shard-state tuple costs about 1.5 KB; at the sampler's
10 Hz an hour of them was tens of MB, and the window's RSS crept up over a session
while the run under it did not. Here each sample is one row of a preallocated float
array (its pages are touched only as rows are written), the chart-only fields (the
shard map's states, the long phase's progress) are not kept, and the oldest rows are
overwritten once the hour is full, as the deque it replaces dropped them.

Iterating gives (time offset, MetricsSample) pairs again, built on demand: export
and pinning a baseline are rare, sampling is not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import numpy as np

from shardscope.engine.measure.metrics import MetricsSample

_DROPPED = ("shard_states", "progress")  # drawn live, never exported
_FIELDS = tuple(f.name for f in dataclasses.fields(MetricsSample) if f.name not in _DROPPED and f.name != "phase")
_INTS = tuple(f.name for f in dataclasses.fields(MetricsSample) if f.type in ("int", int))
_OPTIONAL_INT = ("current_layer_pos",)


class SampleHistory:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SampleHistory capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        # offset + the fields; np.empty: the kernel hands pages over as rows are first written.
        self._rows = np.empty((self.capacity, 1 + len(_FIELDS)), dtype=np.float64)
        self._phase = np.zeros(self.capacity, dtype=np.int16)
        self._phases: list[str] = []  # phase words, indexed by the codes above
        self._next = 0  # the row the next sample goes to
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, item: tuple[float, MetricsSample]) -> None:
        offset, s = item
        row = self._rows[self._next]
        row[0] = offset
        for i, name in enumerate(_FIELDS, start=1):
            value = getattr(s, name)
            row[i] = math.nan if value is None else value
        try:
            code = self._phases.index(s.phase)
        except ValueError:
            self._phases.append(s.phase)
            code = len(self._phases) - 1
        self._phase[self._next] = code
        self._next = (self._next + 1) % self.capacity
        self._len = min(self._len + 1, self.capacity)

    def __iter__(self) -> Iterator[tuple[float, MetricsSample]]:
        first = (self._next - self._len) % self.capacity
        for k in range(self._len):
            i = (first + k) % self.capacity
            row = self._rows[i]
            values = {}
            for j, name in enumerate(_FIELDS, start=1):
                v = float(row[j])
                if name in _OPTIONAL_INT:
                    values[name] = None if math.isnan(v) else int(v)
                elif name in _INTS:
                    values[name] = int(v)
                else:
                    values[name] = v
            yield float(row[0]), MetricsSample(**values, phase=self._phases[self._phase[i]])

    def clear(self) -> None:
        self._next = self._len = 0


__all__ = ["SampleHistory"]
