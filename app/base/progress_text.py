"""'4 / 12 runs, 0:09 elapsed, about 0:18 left': what a long search tells its user.

A sweep runs for minutes; a bar alone does not say whether to wait or come back
later. The estimate is the mean time per finished combination so far times the
ones left: skipped combinations cost no run and pull the mean down, so it is
rough, and it says "about".
"""

from __future__ import annotations

from shardscope.engine.measure.progress_words import clock  # one clock format for every estimate

__all__ = ["clock", "eta_text"]


def eta_text(done: int, total: int, elapsed_s: float, unit: str = "runs") -> str:
    text = f"{done} / {total} {unit}, {clock(elapsed_s)} elapsed"
    if 0 < done < total:
        text += f", about {clock(elapsed_s / done * (total - done))} left"
    return text
