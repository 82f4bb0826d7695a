"""Run settings and their validation, derived from the knob registry (engine.knobs)."""

from __future__ import annotations

from shardscope.engine.knobs.knobs import DEFAULT_PROMPT, KNOBS, RunSettings

__all__ = ["RunSettings", "DEFAULT_PROMPT", "POLICIES", "EXPERT_POLICIES", "RANGES", "validate"]

POLICIES = KNOBS["policy"].choices
EXPERT_POLICIES = KNOBS["expert_policy"].choices

# (low, high) inclusive, from each knob's declaration; the GUI clamps, the loaders refuse.
RANGES: dict[str, tuple[float, float]] = {
    key: (spec.low, spec.high) for key, spec in KNOBS.items() if spec.low is not None
}


def validate(settings: RunSettings, source: str = "settings") -> RunSettings:
    """Refuse values no run could use, naming the key, before anything is loaded.

    ``source`` names where the values came from (a profile path, "command line") so
    the message tells the user which file or flag to fix.
    """
    from shardscope.engine.base.errors import ShardscopeError
    from shardscope.engine.base.quantity_text import number_text

    for key, (low, high) in RANGES.items():
        value = getattr(settings, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ShardscopeError(f"{source}: '{key}' must be a number, got {value!r}")
        if not low <= value <= high:
            raise ShardscopeError(
                f"{source}: '{key}' = {number_text(value)} is out of range ({number_text(low)} to {number_text(high)})"
            )
    for key, spec in KNOBS.items():
        value = getattr(settings, key)
        if spec.choices and value not in spec.choices:
            raise ShardscopeError(
                f"{source}: '{key}' must be one of {', '.join(spec.choices)}, got {value!r}"
            )
        if spec.type is bool and not isinstance(value, bool):
            raise ShardscopeError(f"{source}: '{key}' must be true or false, got {value!r}")
    return settings
