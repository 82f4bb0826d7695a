"""A device's flash as its own probe measured it: read time as a function of request size and requests in flight.

One rate and one latency do not describe a phone's flash: BigMoeOnEdge's probe of the OnePlus 15R
reads 576 KiB requests at 967 MiB/s with one reader but 4 MiB ones at 1810, and two readers reach
2460 MiB/s at 4 MiB yet only 1785 at 576 KiB. Four numbers do, each a line through the probe:

* a reader alone spends ``t1(s) = a + s / b`` on a request of ``s`` bytes (``a`` its fixed cost:
  the command, the flash's access time, the syscall; ``b`` its byte rate);
* the device, however many readers keep it busy, spends ``S(s) = c + s / B`` of its own time on
  the request (``c`` what it cannot overlap with another request, ``B`` the saturated byte rate).

A request waits ``t1(s) - S(s)`` in its lane (the part other requests' transfers can hide), then
takes ``S(s)`` of the device after the requests booked before it; its lane frees when it is done.
In steady state ``q`` readers of ``s``-byte requests therefore move

    rate(s, q) = min(q x s / t1(s), s / S(s))      bytes per second

and a batch of requests (one MoE layer's misses) is scheduled exactly so, lane by lane
(:meth:`FlashModel.batch_seconds`). With ``c = 0`` and ``b = B`` this is the emulator's SSD model
(``engine.stream.ssd_rate_limiter.SsdModel``: a latency, one rate, a queue depth) to the byte,
which is what a preset without a probe gets.

Reads into pages the kernel must first fault in (an expert cache that released an evicted expert's
pages, so each miss lands in fresh ones: BigMoeOnEdge's on Android, whose commit is "on first touch")
cost the reading lane ``fresh_page_s_per_byte`` more, on its own CPU, before the device is free to
take its next request from it: the lane waits ``t1(s) - S(s) + s x f``. A probe reading into a reused
buffer never pays it; ``Device.cache_flash_model`` adds the preset's ``[first_touch_us_per_mib]``.

The fit (:func:`fit_flash_model`), once per preset when it is read: ``a`` and ``b`` by least
squares through the one-reader rows (per-request time s / rate against s); ``c`` and ``B`` through
each request size's best rate over its rows with more readers (past the knee more readers only
queue: the best rate is the saturated one), or ``c = 0`` with one such size. A probe that gives three
sizes or more with several readers is followed size by size instead of by the line: ``S(s) = s / R(s)``,
``R`` each probed size's best rate, linear in log(s) between them and the end's rate beyond them. A
device's saturated rate need not grow with the request (the OnePlus 15R's sweep: 2251 MiB/s at 1 MiB,
2155 at 2 MiB, 2460 at 4 MiB), and a line through such rows misplaces the sizes a layout actually reads.
A preset's ``[flash_probe]`` holds the rows and their source.

Units: bytes, seconds, MB/s = 10^6 bytes/s (the probe's rows are in KiB and MiB/s, as published).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import mib_text
from shardscope.engine.base.units import MIB
from shardscope.engine.stream.ssd_rate_limiter import SsdModel


@dataclass(frozen=True)
class ProbeRead:
    """One row of a flash probe: requests of ``request_bytes``, ``in_flight`` at a time, ``mib_s`` measured."""

    request_bytes: int
    in_flight: int
    mib_s: float

    @property
    def seconds_per_request(self) -> float:
        return self.request_bytes / (self.mib_s * MIB)


@dataclass(frozen=True)
class FlashModel(SsdModel):
    """The SSD model with a reader's own rate and a device cost per request (module doc).

    ``mb_s`` = B (saturated), ``latency_s`` = a (a reader's fixed cost per request),
    ``queue_depth`` = the requests in flight the deployment keeps (its I/O lanes),
    ``reader_mb_s`` = b (0: the same as B), ``request_s`` = c. ``source`` says where the numbers came from.
    """

    reader_mb_s: float = 0.0
    request_s: float = 0.0
    source: str = ""
    fresh_page_s_per_byte: float = 0.0  # f: the lane's own cost of faulting in the pages it reads into
    # ((request bytes, saturated MB/s), ...) by size, from a probe with three or more sizes read by several
    # readers: S(s) follows the probe between its sizes instead of the line c + s / B (module doc)
    device_rates: tuple[tuple[int, float], ...] = ()

    @property
    def _reader_b_s(self) -> float:
        return (self.reader_mb_s or self.mb_s) * 1e6

    def one_reader_seconds(self, request_bytes: float) -> float:
        """t1(s): one request with nothing else in flight."""
        return self.latency_s + request_bytes / self._reader_b_s

    def device_seconds(self, request_bytes: float) -> float:
        """S(s): the device's own time for one request, the part no other request hides."""
        if self.device_rates:
            return request_bytes / (_interpolated_rate(self.device_rates, request_bytes) * 1e6)
        return self.request_s + request_bytes / (self.mb_s * 1e6)

    def rate_mb_s(self, request_bytes: float, in_flight: int) -> float:
        """Steady-state MB/s with ``in_flight`` readers of ``request_bytes`` each (the probe's figure)."""
        lanes = in_flight * request_bytes / self.one_reader_seconds(request_bytes)
        device = request_bytes / self.device_seconds(request_bytes)
        return min(lanes, device) / 1e6

    def batch_seconds(self, sizes: list[int]) -> float:
        """Seconds to read requests of ``sizes`` issued together on an idle device, ``queue_depth`` at a time."""
        if not sizes:
            return 0.0
        lanes = [0.0] * max(1, int(self.queue_depth))
        device_free = finish = 0.0
        for size in sizes:
            start = heapq.heappop(lanes)
            held = self.device_seconds(size)
            # the wait in the lane: t1 - S (a - c + s (1/b - 1/B) for the line), never negative
            ready = start + max(0.0, self.one_reader_seconds(size) - held)
            ready += size * self.fresh_page_s_per_byte
            device_free = max(ready, device_free) + held
            heapq.heappush(lanes, device_free)
            finish = max(finish, device_free)
        return finish

    def describe(self) -> str:
        if not self.device_rates and not self.request_s and (not self.reader_mb_s or self.reader_mb_s == self.mb_s):
            return super().describe()
        if self.device_rates:
            (s0, r0), (s1, r1) = self.device_rates[0], self.device_rates[-1]
            device = (f"at its probe's saturated rate for each size ({mib_text(s0)} {r0:.0f} … {mib_text(s1)} "
                      f"{r1:.0f} MB/s, {len(self.device_rates)} sizes)")
        else:
            device = f"{self.request_s * 1e6:.0f} µs + s / {self.mb_s:.0f} MB/s (saturated)"
        return (f"one reader {self.latency_s * 1e6:.0f} µs + s / {self.reader_mb_s:.0f} MB/s a request; the device "
                f"{device}; {self.queue_depth} in flight")


def _interpolated_rate(table: tuple[tuple[int, float], ...], request_bytes: float) -> float:
    """MB/s at ``request_bytes``: linear in log(size) between the probe's sizes, the end's rate beyond them."""
    if request_bytes <= table[0][0]:
        return table[0][1]
    for (s0, r0), (s1, r1) in zip(table, table[1:]):
        if request_bytes <= s1:
            w = math.log(request_bytes / s0) / math.log(s1 / s0)
            return r0 + w * (r1 - r0)
    return table[-1][1]


def plain_flash_model(mb_s: float, latency_s: float = 0.0, queue_depth: int = 32, source: str = "") -> FlashModel:
    """One rate, one latency, a queue depth: a preset without a probe (the emulator's model exactly)."""
    return FlashModel(mb_s, latency_s, queue_depth, source=source)


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of y on x."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def fit_flash_model(reads: list[ProbeRead], lanes: int, where: str = "flash probe", source: str = "") -> FlashModel:
    """The four numbers through a probe's rows (module doc); one line naming ``where`` if the rows cannot give them."""
    one = [(r.request_bytes, r.seconds_per_request) for r in reads if r.in_flight == 1]
    if len({s for s, _ in one}) < 2:
        raise ShardscopeError(f"{where}: needs one-reader rows (in flight 1) at two request sizes at least, "
                              f"got {len({s for s, _ in one})}")
    a, per_byte = _line(one)
    best: dict[int, float] = {}
    for r in reads:
        if r.in_flight > 1:
            best[r.request_bytes] = max(best.get(r.request_bytes, 0.0), r.mib_s)
    if not best:
        raise ShardscopeError(f"{where}: needs a row with more than one request in flight (the saturated rate)")
    sat = [(s, s / (x * MIB)) for s, x in best.items()]
    if len(sat) == 1:
        c, per_byte_device = 0.0, sat[0][1] / sat[0][0]
    else:
        c, per_byte_device = _line(sat)
    if per_byte <= 0 or per_byte_device <= 0:
        raise ShardscopeError(f"{where}: the rows give a rate that falls as requests grow; check the rows")
    b, big_b = 1.0 / per_byte, 1.0 / per_byte_device
    if a < 0 or c < 0:
        raise ShardscopeError(f"{where}: the rows give a negative cost per request ({a * 1e6:.0f} µs one reader, "
                              f"{c * 1e6:.0f} µs the device); check the rows")
    # With three sizes or more the probe is followed size by size: its rates need not lie on one line (their
    # read-size sweep dips at 2 MiB between 1 and 4 MiB), and a layout's requests sit between its sizes.
    table = tuple(sorted((s, x * MIB / 1e6) for s, x in best.items())) if len(best) >= 3 else ()
    return FlashModel(big_b / 1e6, a, lanes, reader_mb_s=b / 1e6, request_s=min(c, a), source=source,
                      device_rates=table)


def probe_reads(rows, where: str) -> list[ProbeRead]:
    """[flash_probe] reads: rows of [request KiB, requests in flight, MiB/s], each checked."""
    key = f"{where}: 'flash_probe.reads'"
    if not isinstance(rows, list) or not rows:
        raise ShardscopeError(f"{key} must be a list of [request KiB, requests in flight, MiB/s] rows")
    out = []
    for n, row in enumerate(rows, 1):
        ok = (isinstance(row, list) and len(row) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                            for v in row))
        if not ok or row[0] <= 0 or row[2] <= 0 or row[1] != int(row[1]) or row[1] < 1:
            raise ShardscopeError(f"{key} row {n}: expected [request KiB > 0, whole requests in flight >= 1, "
                                  f"MiB/s > 0], got {row!r}")
        out.append(ProbeRead(int(row[0] * 1024), int(row[1]), float(row[2])))
    return out


__all__ = ["FlashModel", "ProbeRead", "fit_flash_model", "plain_flash_model", "probe_reads"]
