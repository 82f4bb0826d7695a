"""The SSD emulator on a fake clock: rate in 10^6 B/s, no banked idle time, off at 0."""

from __future__ import annotations

import pytest

from shardscope.engine.stream.ssd_rate_limiter import SsdRateLimiter


class FakeTime:
    def __init__(self):
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


def _limiter(mb_s: float):
    t = FakeTime()
    return SsdRateLimiter(mb_s, clock=t.clock, sleep=t.sleep), t


def test_rate_is_decimal_megabytes_per_second():
    limiter, t = _limiter(100)  # 100 x 10^6 B/s
    for _ in range(10):
        limiter.throttle(10_000_000)  # 10^7 B: 0.1 s each on the emulated disk
    # the first chunk starts at once; the tenth may start 0.9 s after the first
    assert t.now - 100.0 == pytest.approx(0.9)
    limiter.throttle(0)
    assert t.now - 100.0 == pytest.approx(1.0)  # 10^8 B took exactly 1 s


def test_idle_time_is_not_banked():
    limiter, t = _limiter(1)  # 10^6 B/s
    limiter.throttle(1_000_000)
    t.now += 60.0  # a long pause in compute
    limiter.throttle(1_000_000)
    limiter.throttle(1_000_000)
    assert t.slept == [pytest.approx(1.0)]  # the third waits for the second: no burst


def test_zero_rate_never_waits_and_rate_changes_apply_to_the_next_chunk():
    limiter, t = _limiter(0)
    for _ in range(5):
        limiter.throttle(10**9)
    assert t.slept == []
    limiter.mb_s = 2
    limiter.throttle(2_000_000)
    limiter.throttle(1)
    assert t.slept == [pytest.approx(1.0)]
    limiter.mb_s = -5
    assert limiter.mb_s == 0.0


def test_real_clock_keeps_the_rate():
    import time

    limiter = SsdRateLimiter(50)  # 50 x 10^6 B/s
    start = time.perf_counter()
    for _ in range(5):
        limiter.throttle(2_000_000)  # 10^7 B in all: ≥ 0.16 s before the fifth may start
    assert time.perf_counter() - start >= 0.16


# ------------------------------------------------------------ latency and queue depth

def test_lone_small_read_pays_latency_plus_bytes():
    from shardscope.engine.stream.ssd_rate_limiter import SsdModel

    t = FakeTime()
    limiter = SsdRateLimiter(100, clock=t.clock, sleep=t.sleep, latency_s=0.001, queue_depth=4)
    with limiter.pacing([100_000]):  # 10^5 B at 10^8 B/s = 1 ms, after 1 ms of latency
        pass
    assert t.now - 100.0 == pytest.approx(0.002)
    assert SsdModel(100, 0.001, 4).batch_seconds([100_000]) == pytest.approx(0.002)


def test_queue_depth_hides_latency_behind_transfers():
    from shardscope.engine.stream.ssd_rate_limiter import SsdModel

    sizes = [100_000] * 8  # 8 requests of 1 ms transfer each, 1 ms latency
    deep, shallow = SsdModel(100, 0.001, 8), SsdModel(100, 0.001, 1)
    assert deep.batch_seconds(sizes) == pytest.approx(0.001 + 0.008)  # one latency, then back to back
    assert shallow.batch_seconds(sizes) == pytest.approx(8 * 0.002)  # latency paid per request
    # the emulator books the same schedule: the last of 8 concurrent reads ends at 9 ms
    t = FakeTime()
    limiter = SsdRateLimiter(100, clock=t.clock, sleep=t.sleep, latency_s=0.001, queue_depth=8)
    finishes = [limiter._book([s])[1] for s in sizes]
    assert finishes[-1] - 100.0 == pytest.approx(0.009)


def test_read_seconds_splits_bytes_into_requests_and_batches():
    from shardscope.engine.stream.ssd_rate_limiter import REQUEST_BYTES, SsdModel, split_requests

    assert split_requests([REQUEST_BYTES * 2 + 10, 0, 5]) == [REQUEST_BYTES, REQUEST_BYTES, 10, 5]
    m = SsdModel(200, 0.0005, 2)
    # 4 batches of 3 requests of 10^5 B: each batch = 2 overlapped, then one more behind them
    one = m.batch_seconds([100_000] * 3)
    assert m.read_seconds(12 * 100_000, 12, 4) == pytest.approx(4 * one)
    assert SsdModel(200).read_seconds(10**6, 50, 5) == pytest.approx(10**6 / 200e6)  # no latency: bytes only
