"""The one finite-number check: bools, strings, NaN and infinities are refused by name."""

from __future__ import annotations

import argparse
import math
import numbers

from shardscope.engine.base.errors import ShardscopeError

ANY, ZERO_OR_MORE, POSITIVE = "a number", "0 or more", "a positive number"


def is_finite_number(value) -> bool:
    """A real number that is not a bool, NaN or an infinity."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def finite_number(value, where: str, key: str, *, sign: str = ANY) -> float:
    """``value`` as a float, or one ShardscopeError line naming ``where`` and ``key``.

    ``sign`` is ANY, ZERO_OR_MORE or POSITIVE; the message says which was expected.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ShardscopeError(f"{where}: '{key}' must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ShardscopeError(f"{where}: '{key}' must be a finite number, got {value!r}")
    if (sign == POSITIVE and value <= 0) or (sign == ZERO_OR_MORE and value < 0):
        raise ShardscopeError(f"{where}: '{key}' must be {sign}, got {value!r}")
    return float(value)


def finite_float_arg(text: str) -> float:
    """An argparse ``type=``: a finite float, or argparse's usage error naming the flag."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value
