"""Quantities as a person reads them (1.2 GB, 3,669 MiB, 53 s, 0.019 tok/s, 1.56T params): one
spelling for every sizing line."""

from __future__ import annotations

from shardscope.engine.base.units import MIB


def bytes_text(n: float) -> str:
    """Decimal units (kB/MB/GB/TB = 10^3..10^12), like disk sizes and bandwidths."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def mib_text(n: float) -> str:
    """Memory amounts in MB = MiB, the unit of budget_mb, so they compare with the budget."""
    if n < 10 * MIB:
        return f"{n / MIB:.3g} MiB"
    return f"{n / MIB:,.0f} MiB"


def seconds_text(s: float) -> str:
    if s >= 7200:
        return f"{s:,.0f} s ({s / 3600:.1f} h)"
    if s >= 120:
        return f"{s:,.0f} s ({s / 60:.1f} min)"
    if s >= 1 or s == 0:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} µs"


def rate_text(tokens_per_s: float) -> str:
    if tokens_per_s >= 0.1:
        return f"{tokens_per_s:.3g} tok/s"
    return f"{tokens_per_s:.2g} tok/s (one token every {seconds_text(1 / tokens_per_s)})"


def params_text(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """"1 layer", "61 layers": a count with its noun (``many`` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def number_text(x: float) -> str:
    """A number as a person writes it: 1,048,576 and 0.5, never 1.04858e+06."""
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.6g}" if abs(x) < 1e6 else f"{x:,.0f}"
