"""The loop both run kinds share: the sampler from the moment the run starts, then rounds."""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

Summary = TypeVar("Summary")


def start_sampling(sampler, samples, on_sample: Callable | None) -> None:
    """Start ``sampler`` feeding ``samples`` and ``on_sample``: before the load, so the
    charts hold the load and the prompt pass too, not only what follows the first token."""
    sampler.subscribe(samples.append)
    if on_sample:
        sampler.subscribe(on_sample)
    sampler.start()


def rounds(one_round: Callable[[], Summary], *, continuous: bool,
           on_summary: Callable[[Summary], None] | None, stop: threading.Event) -> Summary:
    """One round, or while ``continuous`` until ``stop`` is set; each summary goes to
    ``on_summary`` and the last one is returned."""
    while True:
        summary = one_round()
        if on_summary:
            on_summary(summary)
        if not continuous or stop.is_set():
            return summary
