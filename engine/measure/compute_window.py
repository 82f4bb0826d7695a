"""The compute a run's settings need per token, from its recent tokens: a low quantile of them.

A token's compute here is its wall time less its wait for loads (and at most the decode
thread's CPU time). On this shared 2-core VM whole rounds run 2x slower while others' runs
hold the cores or the memory bus (issue 48: rounds of one unchanged setting projected at
51-96 tok/s): the median of one round moves with them. A token's compute cannot be shorter
than the work it does, so the fast tokens are the settings' own cost and the slow ones are
the host's; a device runs alone. So the estimate is the ``QUANTILE`` (a tenth, so one
mis-timed token does not set it) of the last ``SIZE`` decoded tokens (about 20 rounds of 16),
tokens the host stalled left out (engine/measure/token_stalls.py). Measured on the issue's
MoE case (qwen3moe 250 MiB at 90 MiB, 1 thread, 120 s while other engineers' runs shared the
host): a round's median varied 2.1x, this estimate 1.14x; 160 tokens 1.18x, the 25th
percentile 1.17x (docs/decisions.md).

The run clears it when its settings change (RunSkeleton._take): the tokens before measured
other settings.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Sequence

from shardscope.engine.measure.host_steal import thread_cpu_s
from shardscope.engine.measure.token_stalls import stalled_tokens

__all__ = ["ComputeWindow", "RoundTokens", "SIZE", "QUANTILE", "MIN_TOKENS", "SETTLED_TOKENS", "settled"]

SIZE = 320
QUANTILE = 0.1
MIN_TOKENS = 8  # fewer: no estimate (the round's own median stands in)
SETTLED_TOKENS = 32  # a search counts a round once its estimate stands on this many tokens


class ComputeWindow:
    def __init__(self, size: int = SIZE, quantile: float = QUANTILE) -> None:
        self.quantile = quantile
        self._tokens: deque[float] = deque(maxlen=size)

    def add(self, token_s: Sequence[float], token_wait_s: Sequence[float], token_cpu_s: Sequence[float] = ()) -> None:
        """A round's tokens: each one's compute, the stalled ones left out."""
        if len(token_wait_s) != len(token_s):
            return
        cpu = list(token_cpu_s) if len(token_cpu_s) == len(token_s) else [math.inf] * len(token_s)
        out = set(stalled_tokens(token_s))
        for i, (dt, w, c) in enumerate(zip(token_s, token_wait_s, cpu)):
            if i not in out:
                self._tokens.append(max(0.0, min(dt - w, c if math.isfinite(c) else math.inf)))

    def clear(self) -> None:
        self._tokens.clear()

    def __len__(self) -> int:
        return len(self._tokens)

    def estimate(self) -> float | None:
        """The quantile of the window's tokens (seconds); None with fewer than MIN_TOKENS."""
        if len(self._tokens) < MIN_TOKENS:
            return None
        xs = sorted(self._tokens)
        return xs[int(self.quantile * (len(xs) - 1))]


class RoundTokens:
    """One round's per-token readings, taken on the decode thread at each token: the streamer's
    wait counter and the thread's CPU time; ``attach`` turns them into the summary's per-token
    tuples (not columns), adds them to the run's ComputeWindow and sets its estimate."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.cpu: list[float] = []

    def token(self, wait_s: float) -> None:
        self.waits.append(wait_s)
        self.cpu.append(thread_cpu_s())

    def attach(self, summary, token_s: Sequence[float], first_t: float | None, last_t: float | None,
               window: ComputeWindow) -> None:
        w, c = self.waits, self.cpu
        summary.token_s = tuple(token_s)
        summary.token_wait_s = tuple(b - a for a, b in zip(w, w[1:]))
        summary.token_cpu_s = tuple(b - a for a, b in zip(c, c[1:]))
        if first_t is not None:  # wall time between the tokens' decodes: a pause there is in no token's time
            summary.between_tokens_s = max(0.0, (last_t or first_t) - first_t - sum(token_s))
        window.add(summary.token_s, summary.token_wait_s, summary.token_cpu_s)
        summary.compute_s_estimate = window.estimate()
        summary.compute_tokens = len(window)  # how many tokens the estimate stands on


def settled(summary, round_number: int) -> bool:
    """Whether a search counts a run's ``round_number``-th round: its compute estimate stands on
    SETTLED_TOKENS tokens (a tenth of a dozen tokens is one token), or 2 warm rounds ran before it (rounds
    of 2-3 tokens would otherwise warm up for a dozen). A summary without the attribute (a replayed row) counts."""
    return getattr(summary, "compute_tokens", SETTLED_TOKENS) >= SETTLED_TOKENS or round_number > 3
