"""``shardscope devices``: the device ids that --device, tune and size take, with the numbers a
projection uses, so nobody has to guess an id or read the preset folder."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("devices", help="list the devices --device, tune and size accept",
                       description="One line per built-in device preset (profiles/devices/*.toml): its id, name, "
                                   "app memory limit, SSD and DRAM bandwidth and cores; '*' marks a number the "
                                   "preset does not verify, 'calibrated' one measured by shardscope calibrate.")
    p.set_defaults(func=cmd_devices)


def _number(device, quantity: str, value: float) -> str:
    mark = "" if device.is_verified(quantity) else "*"
    if quantity in device.calibrated:
        mark += " (calibrated)"
    return f"{value:g}{mark}"


def device_lines() -> list[str]:
    from shardscope.engine.devices.devices import builtin_devices, get_device

    head = ["id", "name", "app limit MB", "SSD MB/s", "DRAM MB/s", "cores (P+E)"]
    rows = []
    for device_id in builtin_devices():
        d = get_device(device_id)  # with the user's calibration, as a run would use it
        rows.append([d.id, d.name, _number(d, "app_memory_limit_mb", d.app_memory_limit_mb),
                     _number(d, "ssd_read_mb_s", d.ssd_read_mb_s), _number(d, "dram_mb_s", d.dram_mb_s),
                     f"{d.performance_cores}+{d.efficiency_cores}"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [head, *rows]]


def cmd_devices(args) -> int:
    print("\n".join(device_lines()))
    print("* not verified by the preset (derived, borrowed or assumed); see profiles/devices/<id>.toml")
    return 0
