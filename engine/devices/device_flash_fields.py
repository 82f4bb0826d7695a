"""A preset's flash tables read into Device fields: [flash_probe] (fitted once, here),
[cache_mgmt_us_per_mib] and [first_touch_us_per_mib]. Each defect is one line naming the file and the key
(engine/devices/device_fields.py's checks); kept apart so engine/devices/devices.py stays short."""

from __future__ import annotations

from shardscope.engine.devices.device_fields import QUANTITY_KEYS, read_quantity, read_string, read_table
from shardscope.engine.devices.flash_model import fit_flash_model, probe_reads


def flash_fields(data: dict, where: str, queue_depth: int, note) -> dict:
    """Device keyword arguments from the flash tables; ``note(key, table)`` records each source."""
    out: dict = {}
    if "cache_mgmt_us_per_mib" in data:
        out["cache_mgmt_us_per_mib"], table = read_quantity(data, "cache_mgmt_us_per_mib", where)
        note("cache_mgmt_us_per_mib", table)
    if "first_touch_us_per_mib" in data:
        out["first_touch_us_per_mib"], table = read_quantity(data, "first_touch_us_per_mib", where,
                                                         QUANTITY_KEYS | {"calibrated_from"})
        out["first_touch_from"] = read_string(table, "calibrated_from", f"{where}: [first_touch_us_per_mib]",
                                          required=False)
        note("first_touch_us_per_mib", table)
    if "flash_probe" in data:
        probe = read_table(data, "flash_probe", where, {"reads", "source", "verified"})
        note("flash_probe", probe)
        out["flash_fit"] = fit_flash_model(probe_reads(probe.get("reads"), where), queue_depth,
                                           f"{where}: [flash_probe]", source=probe["source"])
    return out


__all__ = ["flash_fields"]
