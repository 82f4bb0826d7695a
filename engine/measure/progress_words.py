"""A phase's progress in words: "prompt 56 % · layer 9 of 16 · 62 MB read · 39 MB/s · about 0:01 left".

One wording for the window's status bar and the CLI's progress line, so a user who
knows one reads the other. Units as everywhere here (engine/base/units.py): sizes in
MiB ("MB", GB above 10 GB), rates in 10^6 B/s.
"""

from __future__ import annotations

import math

from shardscope.engine.base.units import MIB
from shardscope.engine.measure.phase_progress import Progress


def clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def size_text(n_bytes: float) -> str:
    mb = n_bytes / MIB
    return f"{mb / 1024:,.1f} GB" if mb >= 10_240 else f"{mb:,.0f} MB"


def progress_parts(p: Progress) -> list[str]:
    """The figures after the phase name and percentage, each one short."""
    parts = []
    if p.n_batches > 1:
        parts.append(f"batch {p.batch + 1} of {p.n_batches}")
    if p.layer is not None and p.n_layers:
        parts.append(f"layer {p.layer + 1} of {p.n_layers}")
    if p.total_bytes:
        parts.append(f"{size_text(p.done_bytes)} of {size_text(p.total_bytes)}")
    elif p.done_bytes:
        parts.append(f"{size_text(p.done_bytes)} read")
    if math.isfinite(p.rate_mb_s) and p.rate_mb_s > 0:
        parts.append(f"{p.rate_mb_s:,.0f} MB/s")
    if math.isfinite(p.eta_s) and p.fraction < 1.0:
        parts.append(f"about {clock(p.eta_s)} left")
    else:
        parts.append(f"{clock(p.elapsed_s)} elapsed")
    return parts


def progress_text(p: Progress) -> str:
    head = p.phase if math.isnan(p.fraction) else f"{p.phase} {p.percent:.0f} %"
    return " · ".join([head] + progress_parts(p))
