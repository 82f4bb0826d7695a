"""The checks a device preset's keys go through: each defect is one line naming the file and the key.

Kept apart from engine/devices/devices.py (which reads the presets) so that each stays short.
"""

from __future__ import annotations

from typing import Any

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import POSITIVE, finite_number

QUANTITY_KEYS = {"value", "source", "verified"}


def type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def check_positive_number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShardscopeError(f"{where}: '{key}' must be a number, got {type_name(value)}")
    return finite_number(value, where, key, sign=POSITIVE)


def read_string(data: dict, key: str, where: str, *, required: bool = True) -> str:
    if key not in data:
        if required:
            raise ShardscopeError(f"{where}: missing key '{key}'")
        return ""
    value = data[key]
    if not isinstance(value, str):
        raise ShardscopeError(f"{where}: '{key}' must be a string, got {type_name(value)}")
    if required and not value.strip():
        raise ShardscopeError(f"{where}: '{key}' must not be empty")
    return value


def read_table(data: dict, key: str, where: str, allowed: set[str]) -> dict:
    table = data[key]
    if not isinstance(table, dict):
        raise ShardscopeError(
            f"{where}: '{key}' must be a table ([{key}] with value, source, verified), "
            f"got {type_name(table)}"
        )
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ShardscopeError(
            f"{where}: unknown key '{key}.{unknown[0]}' (allowed: {', '.join(sorted(allowed))})"
        )
    for name in ("source", "verified"):
        if name not in table:
            raise ShardscopeError(f"{where}: missing key '{key}.{name}'")
    read_string(table, "source", f"{where}: [{key}]")
    if not isinstance(table["verified"], bool):
        raise ShardscopeError(
            f"{where}: '{key}.verified' must be true or false, got {type_name(table['verified'])}"
        )
    return table


def read_quantity(data: dict, key: str, where: str, allowed: set[str] = QUANTITY_KEYS) -> tuple[float, dict]:
    table = read_table(data, key, where, allowed)
    if "value" not in table:
        raise ShardscopeError(f"{where}: missing key '{key}.value'")
    return check_positive_number(table["value"], where, f"{key}.value"), table


__all__ = ["QUANTITY_KEYS", "check_positive_number", "read_quantity", "read_string", "read_table", "type_name"]
