"""Knob lists for sweeps and auto-tune: "16,64,256", and llama-bench-style ranges.

One flag value is a comma-separated list of items; each item is a value or a range:

* ``0-4``      first-last inclusive, step 1          → 0, 1, 2, 3, 4
* ``1-8+2``    first-last inclusive, add a step      → 1, 3, 5, 7
* ``1-16*2``   first-last inclusive, multiply        → 1, 2, 4, 8, 16
* ``16,64``    plain values                          → 16, 64
* ``0-2,8``    items mix                             → 0, 1, 2, 8

Values keep the order given, duplicates dropped. Knobs with choices (``policy``) take
names only (``pinned,lru``). Every refusal is a :class:`ShardscopeError` whose one line
names the flag, the item and what is wrong, and values outside the knob's declared
range are refused here, before any run starts.
"""

from __future__ import annotations

import re

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import is_finite_number
from shardscope.engine.base.quantity_text import number_text
from shardscope.engine.knobs.knobs import KNOBS as _REGISTRY
from shardscope.engine.knobs.knobs import SWEPT

__all__ = ["parse_knob", "KNOBS", "MAX_VALUES", "format_values", "runnable_range"]

# RunSettings field → value kind: "int" whole numbers, "num" any number, "str" one of the knob's choices.
KNOBS: dict[str, str] = {key: _REGISTRY[key].sweep for key in SWEPT}

_BOOLS = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}

MAX_VALUES = 1000  # a sweep of more runs than this is a typo, not a plan

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_ITEM = re.compile(rf"^{_NUMBER}(?:-{_NUMBER}(?:([+*]){_NUMBER})?)?$")


def _value(text: str, kind: str, flag: str, item: str) -> int | float:
    number = float(text)
    if not is_finite_number(number):
        raise ShardscopeError(f"{flag}: {item!r} is not a finite number")
    if kind == "int":
        if not number.is_integer() or not re.fullmatch(r"\d+", text):
            raise ShardscopeError(f"{flag}: {item!r}: expected whole numbers, got {text!r}")
        return int(text)
    return int(number) if number.is_integer() else number


def _expand(item: str, kind: str, flag: str) -> list[int | float]:
    match = _ITEM.match(item)
    if not match:
        raise ShardscopeError(
            f"{flag}: cannot read {item!r} (expected a number, or a range first-last, "
            "first-last+step, first-last*factor, e.g. 0-4, 1-8+2, 1-16*2)"
        )
    first_t, last_t, op, step_t = match.groups()
    first = _value(first_t, kind, flag, item)
    if last_t is None:
        return [first]
    last = _value(last_t, kind, flag, item)
    if last < first:
        raise ShardscopeError(f"{flag}: range {item!r} ends below its start ({last:g} < {first:g})")
    op = op or "+"
    step = _value(step_t, kind, flag, item) if step_t is not None else 1
    if op == "+" and step <= 0:
        raise ShardscopeError(f"{flag}: range {item!r} needs a step above 0")
    if op == "*" and step <= 1:
        raise ShardscopeError(f"{flag}: range {item!r} needs a factor above 1")
    if op == "*" and first <= 0:
        raise ShardscopeError(f"{flag}: range {item!r} cannot multiply up from {first:g}")
    values: list[int | float] = []
    i = 0
    while True:
        # Additive ranges are computed from the start, so 0.1 steps do not drift.
        value = first + i * step if op == "+" else first * step**i
        if value > last * (1 + 1e-12):
            break
        if isinstance(value, float):
            value = round(value, 9)
            value = int(value) if value.is_integer() else value
        values.append(value)
        if len(values) > MAX_VALUES:
            raise ShardscopeError(f"{flag}: range {item!r} has more than {MAX_VALUES} values")
        i += 1
    return values


def parse_knob(flag: str, text: str, key: str) -> list:
    """Parse one flag's list (see the module doc) for the RunSettings field ``key``."""
    kind = KNOBS.get(key, "num")
    spec = _REGISTRY.get(key)
    if not isinstance(text, str) or not text.strip():
        raise ShardscopeError(f"{flag}: empty list (give values like 16,64 or a range like 0-4)")
    values: list = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise ShardscopeError(f"{flag}: empty item in {text!r} (two commas, or a comma at an end)")
        if kind == "bool":
            if item.lower() not in _BOOLS:
                raise ShardscopeError(f"{flag}: unknown value {item!r} (choose from on, off)")
            values.append(_BOOLS[item.lower()])
        elif kind == "str":
            if item not in spec.choices:
                raise ShardscopeError(f"{flag}: unknown value {item!r} (choose from {', '.join(spec.choices)})")
            values.append(item)
        else:
            values.extend(_expand(item, kind, flag))
        if len(values) > MAX_VALUES:
            raise ShardscopeError(f"{flag}: more than {MAX_VALUES} values")
    if spec is not None and spec.low is not None:
        low, high = spec.low, spec.high
        for value in values:
            if not low <= value <= high:
                raise ShardscopeError(f"{flag}: {number_text(value)} is out of range ({number_text(low)} to "
                                      f"{number_text(high)})")
    return list(dict.fromkeys(values))


def format_values(values: list) -> str:
    """The inverse for messages: "16,64,256"."""
    return ",".join(v if isinstance(v, str) else ("on" if v else "off") if isinstance(v, bool) else f"{v:g}"
                    for v in values)


def runnable_range(key: str, settings) -> tuple[float, float]:
    """(lowest, highest) value of ``key`` a run of ``settings``' model accepts with its other knobs as
    they are: the budget from the one minimum (engine/layout/budget_minimum.py minimum_for), the
    expert cache from the minimum's parts; every other knob its declared range. What a slider may
    offer and what a sweep list is checked against, so neither offers what the engine refuses."""
    spec = _REGISTRY[key]
    if key == "budget_mb":
        from shardscope.engine.layout.budget_minimum import minimum_for

        return float(minimum_for(settings).mb), float(spec.high)
    if key == "expert_cache_mb":
        from shardscope.engine.layout.budget_minimum import minimum_for, whole_mb

        minimum = minimum_for(settings)
        if not minimum.picks_bytes:  # a dense model: no expert cache to size
            return float(spec.low), float(spec.high)
        most = int(settings.budget_mb * (1 << 20)) - minimum.globals_bytes - minimum.window_bytes
        return float(whole_mb(minimum.picks_bytes)), float(max(0, most >> 20))
    return float(spec.low), float(spec.high)
