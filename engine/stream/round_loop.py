"""Rounds of generation with the sampler running: the loop both run kinds share."""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

Summary = TypeVar("Summary")


def sampled_rounds(sampler, samples, on_sample: Callable | None, one_round: Callable[[], Summary], *,
                   continuous: bool, on_summary: Callable[[Summary], None] | None,
                   stop: threading.Event) -> Summary:
    """Start ``sampler`` (feeding ``samples`` and ``on_sample``), run rounds, stop it.

    One round, or while ``continuous`` until ``stop`` is set; each summary goes to
    ``on_summary`` and the last one is returned.
    """
    sampler.subscribe(samples.append)
    if on_sample:
        sampler.subscribe(on_sample)
    sampler.start()
    try:
        while True:
            summary = one_round()
            if on_summary:
                on_summary(summary)
            if not continuous or stop.is_set():
                return summary
    finally:
        sampler.stop()
