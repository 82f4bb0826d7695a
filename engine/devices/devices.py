"""Target devices: the few numbers that decide how fast streamed weights can run there.

A device preset is a small TOML file in ``profiles/devices/``. It records, for each
quantity, the value, where it came from and whether it is verified, because most
phone numbers are derived or measured on a sibling device and the UI must say so.

Units (the same as the rest of shardscope):

* memory sizes in **MB = MiB** (2^20 bytes), like ``budget_mb`` in the run settings;
* bandwidths in **MB/s = 10^6 bytes/s**, like ``ssd_mb_s`` and disk vendors' figures.

File layout (every quantity table has ``value``, ``source`` and ``verified``)::

    id = "iphone-16-pro"
    name = "iPhone 16 Pro (USB-C SSD)"
    storage = "..."                     # optional, free text
    [app_memory_limit_mb]               # the per-app limit: covers everything the app holds
    value = 3072  source = "..."  verified = false
    [app_memory_limit_extended_mb]      # optional: the limit with an entitlement
    value = 6144  requires = "..."  source = "..."  verified = false
    [ram_mb]                            # optional, informative
    [ssd_read_mb_s]                     # where the weights stream from (sequential)
    [ssd_latency_us] [ssd_queue_depth]  # optional: per-request latency (default 0) and requests in flight (32)
    [flash_probe]                       # optional: the device's own read probe, rows of
    reads = [[4096, 1, 1809.9], ...]    #   [request KiB, requests in flight, MiB/s]; the flash model
    source = "..."  verified = true     #   (engine/devices/flash_model.py) is fitted from them once
    [cache_mgmt_us_per_mib]             # optional: an expert cache's cost per missed MiB (default 0)
    [first_touch_us_per_mib]            # optional: a lane's cost per MiB read into fresh pages; calibrated_from
    [dram_mb_s]                         # how fast resident weights can be touched
    [cpu]  performance_cores = 2  efficiency_cores = 4  source = "..."  verified = true
    [gpu]  description = "..."  source = "..."  verified = true
           computes = true                # optional (default false): the deployment computes on the GPU
           compute_scale = 1.0            # optional: its GPU's speed relative to the measuring host's GPU
    [compute_scale]                     # optional, default 1.0 (an assumption)

Any other key is refused, so a typo cannot silently fall back to a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import ZERO_OR_MORE, finite_number
from shardscope.engine.base.toml_file import read_toml
from shardscope.engine.base.units import MIB
from shardscope.engine.devices.device_fields import QUANTITY_KEYS as _QUANTITY_KEYS
from shardscope.engine.devices.device_fields import (
    check_positive_number,
    read_quantity,
    read_string,
    read_table,
    type_name,
)
from shardscope.engine.devices.device_flash_fields import flash_fields
from shardscope.engine.devices.flash_model import FlashModel, plain_flash_model

__all__ = [
    "Device",
    "MIB",
    "DEVICES_DIR",
    "load_device",
    "builtin_devices",
    "get_device",
    "weight_budget_mb",
    "CALIBRATED_QUANTITIES",
    "calibration_path",
    "apply_calibration",
]


DEVICES_DIR = Path(__file__).resolve().parents[2] / "profiles" / "devices"  # engine/devices/ is two down

# A device file is a couple of kilobytes; anything this big is not one.

_REQUIRED_QUANTITIES = ("app_memory_limit_mb", "ssd_read_mb_s", "dram_mb_s")
_OPTIONAL_QUANTITIES = ("app_memory_limit_extended_mb", "ram_mb", "compute_scale", "ssd_latency_us", "ssd_queue_depth",
                        "cache_mgmt_us_per_mib", "first_touch_us_per_mib")
_TOP_LEVEL_KEYS = frozenset(
    {"id", "name", "storage", "cpu", "gpu", "flash_probe", *_REQUIRED_QUANTITIES, *_OPTIONAL_QUANTITIES}
)
_DEFAULT_COMPUTE_SCALE_SOURCE = (
    "default assumption: one core of this device is as fast as one core of the measuring host"
)


@dataclass(frozen=True)
class Device:
    """One target device, with provenance for every number.

    ``sources`` maps a quantity name (``"ssd_read_mb_s"``, ``"cpu"``, ...) to where its
    value came from; ``unverified`` names the quantities that are derived, borrowed
    from a sibling device or assumed, so a UI can label them instead of presenting a
    guess as a fact. ``compute_scale`` is this device's per-core speed relative to the
    host that measured a run (1.0 unless someone has timed both).
    """

    id: str
    name: str
    app_memory_limit_mb: float
    ssd_read_mb_s: float
    dram_mb_s: float
    performance_cores: int
    efficiency_cores: int
    gpu: str
    compute_scale: float = 1.0
    app_memory_limit_extended_mb: float | None = None
    extended_limit_requires: str = ""
    ram_mb: float | None = None
    storage: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False)
    unverified: frozenset[str] = frozenset()
    path: str | None = field(default=None, compare=False)
    calibrated: dict[str, str] = field(default_factory=dict, hash=False)  # quantity → "calibrated from …"
    ssd_latency_us: float = 0.0  # per request; 0 = bandwidth only
    ssd_queue_depth: int = 32
    # Whether the deployment computes on the GPU (llama.cpp on an iPhone: Metal): a run's GPU
    # compute time is then projected at gpu_compute_scale (this GPU's speed relative to the
    # measuring host's GPU), not by CPU cores. False: the GPU's share runs on the CPU cores.
    gpu_compute: bool = False
    gpu_compute_scale: float = 1.0
    # The flash model fitted from the preset's [flash_probe] (None: one rate, one latency, a queue depth)
    flash_fit: FlashModel | None = field(default=None, compare=False)
    # An expert cache's own cost per missed MiB on this device (pages committed for the miss, evicted
    # for it): 0 unless the preset measured it ([cache_mgmt_us_per_mib])
    cache_mgmt_us_per_mib: float = 0.0
    # What a reading lane pays per MiB to fault in the fresh pages a cache miss lands in ([first_touch_us_per_mib];
    # 0: none), and the run it was calibrated from ("" when not calibrated from a run)
    first_touch_us_per_mib: float = 0.0
    first_touch_from: str = ""

    @property
    def cache_flash_model(self) -> FlashModel:
        """The flash model for reads into an expert cache's fresh pages: + the first-touch cost per byte."""
        return replace(self.flash_model, fresh_page_s_per_byte=self.first_touch_us_per_mib * 1e-6 / MIB)

    @property
    def flash_model(self) -> FlashModel:
        """The device's reads as `size`, the window's projection and bench/sweeps/phone_check.py model them:
        the probe's fit where the preset has one, else its rate, latency and queue depth."""
        if self.flash_fit is not None:
            return self.flash_fit
        return plain_flash_model(self.ssd_read_mb_s, self.ssd_latency_us * 1e-6, self.ssd_queue_depth,
                                 source=self.sources.get("ssd_read_mb_s", ""))

    @property
    def ssd_model(self) -> FlashModel:
        """The same as :attr:`flash_model` (the name older callers use)."""
        return self.flash_model

    @property
    def total_cores(self) -> int:
        return self.performance_cores + self.efficiency_cores

    def is_verified(self, quantity: str) -> bool:
        """False for a quantity the preset marks unverified (label it in the UI)."""
        return quantity not in self.unverified

    def with_extended_limit(self) -> "Device":
        """The same device with the entitlement's larger memory limit, for what-ifs.

        Refused when the preset records no extended limit, rather than pretending.
        """
        if self.app_memory_limit_extended_mb is None:
            raise ShardscopeError(f"device {self.id}: no extended memory limit is recorded")
        sources = dict(self.sources)
        sources["app_memory_limit_mb"] = self.sources.get("app_memory_limit_extended_mb", "")
        unverified = set(self.unverified) - {"app_memory_limit_mb"}
        if "app_memory_limit_extended_mb" in self.unverified:
            unverified.add("app_memory_limit_mb")
        return replace(
            self,
            id=self.id + "+extended-limit",
            name=f"{self.name}, increased memory limit",
            app_memory_limit_mb=self.app_memory_limit_extended_mb,
            sources=sources,
            unverified=frozenset(unverified),
        )

    def with_ssd(self, ssd_read_mb_s: float, label: str = "") -> "Device":
        """The same device reading from a different disk (what-if): marked unverified."""
        check_positive_number(ssd_read_mb_s, f"device {self.id}", "ssd_read_mb_s")
        sources = dict(self.sources)
        sources["ssd_read_mb_s"] = label or "what-if value given by the user"
        return replace(
            self,
            ssd_read_mb_s=float(ssd_read_mb_s),
            sources=sources,
            unverified=self.unverified | {"ssd_read_mb_s"},
            flash_fit=None,  # another disk: the probe of this one no longer applies
        )


# --------------------------------------------------------------------- loading
# The key checks (one-line errors naming file and key) are engine/devices/device_fields.py.
_LOADED: dict[tuple, Device] = {}  # (path, mtime, size) → Device: the window projects every round


def load_device(path: str | Path) -> Device:
    """One device TOML file, read again only when it changed (a window projects every round
    onto the chosen preset: parsing every preset each time was a tenth of its GUI thread)."""
    path = Path(path)
    try:
        st = path.stat()
        key = (str(path), st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    except OSError:
        return _read_device(path)  # the read names the file and what is wrong
    if key not in _LOADED:
        _LOADED[key] = _read_device(path)
    return _LOADED[key]


def _read_device(path: str | Path) -> Device:
    """Read and validate one device TOML file.

    Every defect (unreadable file, not TOML, missing key, wrong type, a value that
    is not positive, an unknown key) raises one ``ShardscopeError`` whose one-line
    message names the file and the key, so the user knows exactly what to fix.
    """
    path = Path(path)
    where = str(path)
    data = read_toml(path, "device file")

    unknown = sorted(set(data) - _TOP_LEVEL_KEYS)
    if unknown:
        raise ShardscopeError(
            f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(sorted(_TOP_LEVEL_KEYS))})"
        )
    for key in ("id", "name", *_REQUIRED_QUANTITIES, "cpu", "gpu"):
        if key not in data:
            raise ShardscopeError(f"{where}: missing key '{key}'")

    device_id = read_string(data, "id", where)
    if any(ch.isspace() for ch in device_id):
        raise ShardscopeError(f"{where}: 'id' must not contain spaces, got {device_id!r}")
    name = read_string(data, "name", where)
    storage = read_string(data, "storage", where, required=False)

    sources: dict[str, str] = {}
    unverified: set[str] = set()

    def note(key: str, table: dict) -> None:
        sources[key] = table["source"]
        if not table["verified"]:
            unverified.add(key)

    values: dict[str, float] = {}
    for key in _REQUIRED_QUANTITIES:
        values[key], table = read_quantity(data, key, where)
        note(key, table)

    extended = None
    requires = ""
    if "app_memory_limit_extended_mb" in data:
        extended, table = read_quantity(
            data, "app_memory_limit_extended_mb", where, _QUANTITY_KEYS | {"requires"}
        )
        requires = read_string(table, "requires", f"{where}: [app_memory_limit_extended_mb]", required=False)
        note("app_memory_limit_extended_mb", table)
        if extended < values["app_memory_limit_mb"]:
            raise ShardscopeError(
                f"{where}: 'app_memory_limit_extended_mb.value' ({extended:g}) is below "
                f"'app_memory_limit_mb.value' ({values['app_memory_limit_mb']:g})"
            )

    ram = None
    if "ram_mb" in data:
        ram, table = read_quantity(data, "ram_mb", where)
        note("ram_mb", table)
        if values["app_memory_limit_mb"] > ram:
            raise ShardscopeError(
                f"{where}: 'app_memory_limit_mb.value' ({values['app_memory_limit_mb']:g}) "
                f"exceeds 'ram_mb.value' ({ram:g})"
            )

    compute_scale = 1.0
    if "compute_scale" in data:
        compute_scale, table = read_quantity(data, "compute_scale", where)
        note("compute_scale", table)
    else:
        sources["compute_scale"] = _DEFAULT_COMPUTE_SCALE_SOURCE
        unverified.add("compute_scale")

    ssd = {"ssd_latency_us": 0.0, "ssd_queue_depth": 32}
    for key in ssd:
        if key in data:
            ssd[key], table = read_quantity(data, key, where)
            note(key, table)
    if ssd["ssd_queue_depth"] != int(ssd["ssd_queue_depth"]):
        raise ShardscopeError(f"{where}: 'ssd_queue_depth.value' must be a whole number, "
                              f"got {ssd['ssd_queue_depth']:g}")

    flash = flash_fields(data, where, int(ssd["ssd_queue_depth"]), note)

    cpu = read_table(data, "cpu", where, {"performance_cores", "efficiency_cores", "source", "verified"})
    cores = {}
    for key in ("performance_cores", "efficiency_cores"):
        if key not in cpu:
            raise ShardscopeError(f"{where}: missing key 'cpu.{key}'")
        value = cpu[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ShardscopeError(
                f"{where}: 'cpu.{key}' must be a whole number, got {type_name(value)} {value!r}"
            )
        cores[key] = value
    if cores["performance_cores"] < 1:
        raise ShardscopeError(
            f"{where}: 'cpu.performance_cores' must be at least 1, got {cores['performance_cores']}"
        )
    if cores["efficiency_cores"] < 0:
        raise ShardscopeError(
            f"{where}: 'cpu.efficiency_cores' must be 0 or more, got {cores['efficiency_cores']}"
        )
    note("cpu", cpu)

    gpu = read_table(data, "gpu", where, {"description", "source", "verified", "computes", "compute_scale"})
    gpu_description = read_string(gpu, "description", f"{where}: [gpu]") if "description" in gpu else ""
    if not gpu_description:
        raise ShardscopeError(f"{where}: missing key 'gpu.description'")
    note("gpu", gpu)
    gpu_compute = gpu.get("computes", False)
    if not isinstance(gpu_compute, bool):
        raise ShardscopeError(f"{where}: 'gpu.computes' must be true or false, got {type_name(gpu_compute)}")
    gpu_scale = check_positive_number(gpu["compute_scale"], where, "gpu.compute_scale") \
        if "compute_scale" in gpu else 1.0
    if gpu_compute and "compute_scale" not in gpu:  # a default is an assumption: label it
        unverified.add("gpu_compute_scale")

    return Device(
        id=device_id,
        name=name,
        app_memory_limit_mb=values["app_memory_limit_mb"],
        ssd_read_mb_s=values["ssd_read_mb_s"],
        dram_mb_s=values["dram_mb_s"],
        performance_cores=cores["performance_cores"],
        efficiency_cores=cores["efficiency_cores"],
        gpu=gpu_description,
        compute_scale=compute_scale,
        gpu_compute=gpu_compute,
        gpu_compute_scale=gpu_scale,
        app_memory_limit_extended_mb=extended,
        extended_limit_requires=requires,
        ram_mb=ram,
        storage=storage,
        sources=sources,
        unverified=frozenset(unverified),
        path=str(path),
        ssd_latency_us=ssd["ssd_latency_us"],
        ssd_queue_depth=int(ssd["ssd_queue_depth"]),
        **flash,
    )



def builtin_devices(directory: str | Path | None = None) -> dict[str, Device]:
    """Every preset in ``profiles/devices/``, keyed by id, sorted by id.

    A broken preset is an error, not a silent omission: the caller asked for the
    list, and a missing iPhone would be more confusing than a message naming the file.
    """
    folder = Path(directory) if directory is not None else DEVICES_DIR
    if not folder.is_dir():
        raise ShardscopeError(f"{folder}: device preset folder not found")
    found: dict[str, Device] = {}
    for path in sorted(folder.glob("*.toml")):
        device = load_device(path)
        if device.id in found:
            raise ShardscopeError(
                f"{path}: device id '{device.id}' is already used by {found[device.id].path}"
            )
        found[device.id] = device
    return dict(sorted(found.items()))


def get_device(id_: str) -> Device:
    """The built-in preset with this id, with the user's calibration applied if there
    is one (``shardscope calibrate``); an unknown id lists the known ones."""
    devices = builtin_devices()
    try:
        device = devices[id_]
    except KeyError:
        known = ", ".join(devices) or "(none)"
        raise ShardscopeError(f"unknown device '{id_}' (known devices: {known})") from None
    path = calibration_path(id_)
    return apply_calibration(device, path) if path.exists() else device


# ----------------------------------------------------------------- calibration
# Quantities a real run on the device can measure (engine.devices.calibrate fits them).
CALIBRATED_QUANTITIES = ("compute_scale", "dram_mb_s")
_CALIBRATION_KEYS = _QUANTITY_KEYS | {"calibrated_from", "calibrated_on"}


def calibration_path(device_id: str) -> Path:
    """The user's calibration of a built-in device: <config>/devices/<id>.toml."""
    from shardscope.engine.base.user_dirs import config_dir

    return config_dir() / "devices" / f"{device_id}.toml"


def apply_calibration(device: Device, path: str | Path) -> Device:
    """The device with the calibrated quantities of ``path`` (a file ``save_calibration`` wrote)."""
    where = str(path)
    data = read_toml(path, "device calibration file")
    if data.get("id") != device.id:
        raise ShardscopeError(f"{where}: 'id' must be {device.id!r}, got {data.get('id')!r}")
    unknown = sorted(set(data) - {"id", *CALIBRATED_QUANTITIES})
    if unknown:
        raise ShardscopeError(f"{where}: unknown key '{unknown[0]}' (allowed: id, {', '.join(CALIBRATED_QUANTITIES)})")
    changes: dict[str, float] = {}
    sources, unverified, calibrated = dict(device.sources), set(device.unverified), dict(device.calibrated)
    for key in CALIBRATED_QUANTITIES:
        if key not in data:
            continue
        value, table = read_quantity(data, key, where, _CALIBRATION_KEYS)
        for name in ("calibrated_from", "calibrated_on"):
            read_string(table, name, f"{where}: [{key}]")
        changes[key] = value
        sources[key] = table["source"]
        calibrated[key] = f"calibrated from {Path(table['calibrated_from']).name} on {table['calibrated_on']}"
        if table["verified"]:
            unverified.discard(key)
        else:
            unverified.add(key)
    return replace(device, **changes, sources=sources, unverified=frozenset(unverified), calibrated=calibrated)


def weight_budget_mb(
    device: Device, kv_cache_mb: float, compute_buffers_mb: float, runtime_mb: float
) -> float:
    """Memory left for weights: the app limit minus everything else the app holds.

    Why subtract: the per-app limit covers the whole process (on iOS the app is
    killed when it crosses it), so only what the KV cache, compute buffers and the
    runtime leave over may hold globals and resident shards. Refused when nothing
    is left, with the arithmetic in the message.
    """
    where = f"device {device.id}"
    parts = {"kv_cache_mb": kv_cache_mb, "compute_buffers_mb": compute_buffers_mb, "runtime_mb": runtime_mb}
    for key, value in parts.items():
        finite_number(value, where, key, sign=ZERO_OR_MORE)
    budget = device.app_memory_limit_mb - kv_cache_mb - compute_buffers_mb - runtime_mb
    if budget <= 0:
        raise ShardscopeError(
            f"{where}: no memory left for weights: app limit {device.app_memory_limit_mb:g} MB "
            f"- KV cache {kv_cache_mb:g} MB - compute buffers {compute_buffers_mb:g} MB "
            f"- runtime {runtime_mb:g} MB = {budget:g} MB"
        )
    return float(budget)
