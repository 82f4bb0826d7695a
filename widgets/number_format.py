"""One way of writing a measured number for a human, shared by every widget.

The numbers panel, the chart's level-line labels and any read-out must agree, or
the same 612.4 MB shows as "612" in one place and "6.124e+02" in another. Three
significant figures is what a reader can take in at a glance; more digits only
flicker. Thousands are written in full with separators because "1.23e+04 tok"
reads as noise on a dashboard. Fixed decimals per magnitude keep the text width
steady while the value moves.
"""

from __future__ import annotations

import math
import numbers

MISSING = "\u2014"  # em dash: "no value yet" must not look like a zero
_MAX_DECIMALS = 6


def format_number(value: object) -> str:
    if value is None:
        return MISSING
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if not isinstance(value, numbers.Real):
        return str(value)
    x = float(value)
    if math.isnan(x):
        return MISSING
    if math.isinf(x):
        return "\u221e" if x > 0 else "-\u221e"
    magnitude = abs(x)
    if magnitude >= 100:
        return f"{x:,.0f}"
    if magnitude == 0:
        return "0"
    decimals = min(_MAX_DECIMALS, 2 - math.floor(math.log10(magnitude)))
    text = f"{x:.{decimals}f}"
    if float(text) == 0:
        return "0"
    # Rounding can carry into the next magnitude (99.96 -> "100.0"): re-format so
    # the result still has three significant figures, not four.
    if abs(float(text)) >= 10 ** (3 - decimals) and decimals > 0:
        return format_number(float(text))
    return text
