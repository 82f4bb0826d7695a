"""Metrics sampler: what the charts show, read from the kernel at a fixed rate.

It runs on its own thread so the decode thread never pays for it. Every number comes
from a source a user can check: RSS from psutil, resident weight bytes from own slots'
books plus cachestat where the run streams through own slots, else mincore over the
model's mapping (the file's bytes in RAM), disk bytes from /proc/self/io
``read_bytes``,
cache hits / on-time bytes and token times from the streamer's counters (checked
against mincore at layer start in tests). Consumers subscribe with
a plain callback (the GUI wraps it in a Qt signal); they are called on this thread.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import psutil

from shardscope.engine.base import memory_calls, platform_calls
from shardscope.engine.base.units import MIB, mb_per_s
from shardscope.engine.measure.gpu_memory import gpu_memory_used_mb
from shardscope.engine.measure.phase_progress import PhaseProgress, Progress
from shardscope.engine.measure.token_rate import Tally, tokens_per_second, windowed_fraction

WEIGHTS_DUTY = 0.02  # the share of one core the resident-weights reading may take
MAX_HOLD_S = 2.0  # a held reading is never older than this (a 30 GB mincore at load time: ~0.2 s)
HELD_FROM_BYTES = 4 * 2**30  # mappings this big may hold a reading between samples (verify needs fresh ones)


@dataclass(frozen=True, slots=True)  # slots: a run keeps its last 6,000 (10 minutes at 10 Hz)
class MetricsSample:
    t_s: float
    rss_mb: float
    resident_weights_mb: float  # own slots' books + cachestat, else mincore over the model's mapping
    other_rss_mb: float  # KV cache, compute buffers, Python, Qt: RSS − weights
    ssd_mb_s: float  # 10^6 B/s, kernel: read_bytes delta of this process
    read_mb_total: float  # since the run started
    cache_hit_rate: float  # of the weight bytes needed, resident with no read for this use (NaN before any)
    on_time_rate: float  # of them, resident when compute arrived (NaN before any)
    # Both over the last second, or the last whole token when tokens are slower.
    tok_s: float  # over the last few tokens, held between them (NaN before the first)
    n_tokens: int
    budget_mb: float
    accounted_weights_mb: float  # the streamer's own books, for cross-checks
    cache_hits: int
    cache_misses: int
    on_time: int
    stalls: int
    shard_states: tuple[int, ...] = ()
    current_layer_pos: int | None = None
    emulated_ssd_mb_s: float = 0.0
    phase: str = ""
    # Expert runs only (NaN for dense runs), over the same recent window as the rates above:
    expert_hit_rate: float = math.nan  # picked experts resident when their router picked them
    dense_mb_per_token: float = math.nan  # dense bytes streamed per decoded token
    expert_mb_per_token: float = math.nan  # expert bytes loaded per decoded token
    spec_accuracy: float = math.nan  # guessed experts their layer then picked (NaN: no guesses)
    # Where the expert run's weights sit in its books: the trunk's shards held (0 while the trunk
    # stays in the resident dense pages) and the expert cache's bytes (NaN for dense runs).
    trunk_resident_mb: float = math.nan
    expert_cache_mb: float = math.nan
    progress: Progress | None = None  # the long phase under way (load, prompt pass), else None
    gpu_mb: float = 0.0  # GPU memory in use (engine/measure/gpu_memory.py); 0 on a CPU build
    # Of resident_weights_mb's moment: own-slot bytes being read in place, their pages appearing as
    # the read lands (the kernel holds between resident_weights_mb and it plus this; --verify's bracket)
    arriving_weights_mb: float = 0.0


@dataclass
class TokenClock:
    """Token completion times, written by the decode thread, read by the sampler."""

    times: deque = field(default_factory=lambda: deque(maxlen=4096))
    durations: deque = field(default_factory=lambda: deque(maxlen=4096))
    n_tokens: int = 0
    phase_since: float = 0.0  # when ``phase`` last changed (set with it, below)
    phase: str = "idle"

    def __setattr__(self, name, value):
        # A new round's first token is not late because the prompt pass came before it:
        # the in-flight time counts from the later of the last token and the phase change.
        if name == "phase":
            object.__setattr__(self, "phase_since", time.perf_counter())
        object.__setattr__(self, name, value)

    def record(self, t: float, duration_s: float) -> None:
        self.times.append(t)
        self.durations.append(duration_s)
        self.n_tokens += 1

    def rate(self, now: float, window_s: float = 1.0) -> float:
        """tok/s over the last few tokens; bends down only while a token runs late."""
        durations = list(self.durations)  # one copy under the GIL: the decode thread appends
        times = list(self.times)
        in_flight = None
        if self.phase == "generating" and times:
            started = max(times[-1], self.phase_since if self.phase_since <= now else times[-1])
            in_flight = now - started
        return tokens_per_second(durations, in_flight_s=in_flight, window_s=window_s)


def process_read_bytes(proc: psutil.Process) -> int:
    try:
        return proc.io_counters().read_bytes
    except (AttributeError, psutil.Error):  # macOS: psutil has none; proc_pid_rusage has (platform_calls)
        return platform_calls.process_read_bytes(proc.pid) or 0


class MetricsSampler:
    def __init__(self, streamer, mapping, clock: TokenClock, interval_s: float = 0.1,
                 window_s: float = 1.0, *, progress: PhaseProgress | None = None, model_path: str | None = None):
        self.streamer = streamer  # a ResidencyController (layers) or an ExpertStreamer: its snapshot()
        self.mapping = mapping
        self._weights: int | None = None
        self._weights_due = 0.0
        self._fd: int | None = None
        self._fd_path = ""
        self.clock = clock
        self.interval_s = interval_s
        self.window = max(1, int(round(window_s / interval_s)))
        self._subscribers: list[Callable[[MetricsSample], None]] = []
        self._before: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process()
        self._t0 = time.perf_counter()
        self._read0 = process_read_bytes(self._proc)
        self._history: deque = deque(maxlen=self.window + 1)
        self._token_marks: deque = deque(maxlen=2)  # (cache, on-time) tallies as tokens finished
        self._last_rates = (math.nan, math.nan)  # held while no layer is accessed
        # Expert streamers expose their own counters; the window's expert charts read these.
        self._expert_counters = getattr(streamer, "snapshot_counters", None)
        self._expert_history: deque = deque(maxlen=self.window + 1)
        self._last_expert = (math.nan, math.nan, math.nan, math.nan)
        self.samples_taken = 0
        self.progress = progress
        # Before the load has mapped the model (the sampler runs from the moment Run is
        # pressed), the mapping is looked up each sample: it appears while MAP_POPULATE reads.
        self._model_path = model_path

    def attach(self, streamer, mapping) -> None:
        """The run's streamer and mapping, once the load made them (sampling goes on meanwhile)."""
        self.mapping = mapping
        self._weights = None  # read the new mapping at the next sample
        self._expert_counters = getattr(streamer, "snapshot_counters", None)
        self.streamer = streamer

    def _resident_weights(self, now: float) -> tuple[int | None, int]:
        """(weights in RAM, of them bytes being read in and not yet in the books: 0 but from the books).
        The streamer's own books where it keeps them exactly (own slots: every byte it swapped
        in, plus the file's page cache by cachestat) — a scan per sample took 39 % of a core at
        Kimi's 70k expert slices (issue #24). Else mincore over the whole mapping, at most WEIGHTS_DUTY of one core:
        mincore looks every unmapped page up in the page cache, 57 ms of kernel time per call for a 28 GB model
        (measured: the sampler alone took 67 % of a core at 10 Hz and slowed compute 3x). A
        model that size is read every few samples and the last reading held in between."""
        books = self._weights_from_books()
        if books is not None:
            self._weights = books[0]
            return books
        mapping = self.mapping
        if mapping is None and self._model_path is not None:
            mapping = memory_calls.find_mapping(self._model_path)  # the load maps it meanwhile
        if mapping is None:
            return None, 0
        small = mapping.end - mapping.start < HELD_FROM_BYTES  # cheap to read: fresh at every sample
        if small or self._weights is None or now >= self._weights_due:
            started = time.perf_counter()
            try:
                # Cheap where cachestat exists (cost follows what is resident, not the file's size);
                # else mincore over the whole mapping, duty-cycled.
                weights = memory_calls.model_bytes_in_ram(mapping, self._model_fd(mapping))
                self._weights = weights if weights is not None else \
                    memory_calls.resident_bytes(mapping.start, mapping.end)
            except OSError:  # unmapped under us (a failed load, the header trimmed): the next sample
                return self._weights, 0
            self._weights_due = now + min(MAX_HOLD_S, (time.perf_counter() - started) / WEIGHTS_DUTY)
        return self._weights, 0

    def _weights_from_books(self) -> tuple[int, int] | None:
        """Own slots' bytes (each page of them read in: resident, and counted exactly as they come
        and go, direct_slots.py) plus the file's page cache over the mapped range (cachestat: its
        cost follows what is cached), and the bytes being read in place beside them (slots.books).
        None without slots or cachestat. --verify and the tests check it against mincore from
        another process."""
        slots, mapping = getattr(self.streamer, "slots", None), self.mapping
        if slots is None or mapping is None or not hasattr(slots, "own_bytes"):
            return None
        try:
            fd = self._model_fd(mapping)
        except OSError:  # the model file was deleted or replaced under the run: the guard reports it
            return None
        cached = memory_calls.cached_file_bytes(fd, mapping.file_offset, mapping.end - mapping.start)
        if cached is None:
            return None
        own, arriving = slots.books()
        return own + cached, arriving

    def _model_fd(self, mapping) -> int:
        """A descriptor of the mapped file for cachestat, opened once (closed with the sampler)."""
        if self._fd is None or self._fd_path != mapping.path:
            self._close_fd()
            self._fd, self._fd_path = os.open(mapping.path, os.O_RDONLY), mapping.path
        return self._fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def subscribe(self, callback: Callable[[MetricsSample], None]) -> None:
        self._subscribers.append(callback)

    def before_each_sample(self, callback: Callable[[], None]) -> None:
        """Called on this thread right before each sample reads the kernel: cross-checks
        bracket every sample between two outside readings (engine/runs/verify.py)."""
        self._before.append(callback)

    def start(self) -> None:
        """Start sampling; the time and read baselines were taken at construction."""
        self._thread = threading.Thread(target=self._run, name="shardscope-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self.sample()  # a last sample so the end state is charted too
        self._close_fd()

    def _run(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            self.sample()
            next_t += self.interval_s
            delay = next_t - time.perf_counter()
            if delay < 0:
                next_t = time.perf_counter()
                delay = 0
            self._stop.wait(delay)

    def _expert_rates(self) -> tuple[float, float, float, float]:
        """(hit rate, dense MB/token, expert MB/token, speculation accuracy) over the recent window.

        An expert run's on-time rate is its expert hit rate (resident when picked, a guess in
        time counts), already windowed per token when tokens are slow: it is taken as is."""
        c = self._expert_counters()
        if self.clock.n_tokens == 0:
            # Nothing decoded yet: the cold start's dense reads (sampled now that the sampler
            # runs from the load on) are no decoded token's bytes.
            self._expert_history.clear()
        self._expert_history.append((self.clock.n_tokens, c))
        n_old, old = self._expert_history[0]
        _, dense, expert, spec = self._last_expert
        hit = self._last_rates[1]
        tokens = self.clock.n_tokens - n_old
        if tokens > 0:
            dense = (c.dense_loaded_bytes - old.dense_loaded_bytes) / MIB / tokens
            expert = (c.loaded_bytes - old.loaded_bytes) / MIB / tokens
        issued = c.spec_issued - old.spec_issued
        if issued > 0:
            spec = (c.spec_correct - old.spec_correct) / issued
        self._last_expert = (hit, dense, expert, spec)
        return self._last_expert

    def sample(self) -> MetricsSample:
        for callback in list(self._before):
            callback()
        now = time.perf_counter()
        rss = self._proc.memory_info().rss
        # mincore, not the mapping's Rss in /proc/self/smaps: reading smaps walks and
        # accounts every page of the mapping (5 ms of kernel time for 1 GB, 10x mincore)
        # and, measured, compute layers that overlapped it were 7x likelier to stall.
        # The two agree within the readahead window; tests cross-check them.
        weights, arriving = self._resident_weights(now)
        read_now = process_read_bytes(self._proc)
        read_total = read_now - self._read0
        snap = self.streamer.snapshot() if self.streamer else None
        c = snap.counters if snap else None
        hits, misses = (c.cache_hits, c.cache_misses) if c else (0, 0)
        on_time, stalls = (c.on_time, c.stalls) if c else (0, 0)
        n_tokens = self.clock.n_tokens
        # The rates count bytes, as the run summary does: of the bytes needed, those resident
        # without a read (hit) and those resident when compute arrived (on time).
        needed = c.needed_bytes if c else 0
        tallies = (Tally(now, n_tokens, c.hit_bytes if c else 0, needed),
                   Tally(now, n_tokens, c.on_time_bytes if c else 0, needed))
        if not self._token_marks or self._token_marks[-1][0].n_tokens != n_tokens:
            self._token_marks.append(tallies)
        self._history.append((now, read_total, tallies))
        t_old, read_old, tallies_old = self._history[0]
        ssd = mb_per_s(read_total - read_old, now - t_old)
        rates = tuple(windowed_fraction(old, new, [marks[i] for marks in self._token_marks])
                      for i, (old, new) in enumerate(zip(tallies_old, tallies)))
        self._last_rates = tuple(held if math.isnan(rate) else rate for rate, held in zip(rates, self._last_rates))
        weights_b = weights if weights is not None else 0
        expert = self._expert_rates() if self._expert_counters is not None else self._last_expert
        split = getattr(self.streamer, "resident_split", None)  # an expert streamer's (trunk, cache) bytes
        trunk_b, cache_b = split() if split is not None else (math.nan, math.nan)
        sample = MetricsSample(
            t_s=now - self._t0,
            rss_mb=rss / MIB,
            resident_weights_mb=weights_b / MIB,
            arriving_weights_mb=arriving / MIB,
            other_rss_mb=max(0, rss - weights_b) / MIB,  # readahead can be cached, not mapped
            ssd_mb_s=ssd,
            read_mb_total=read_total / MIB,
            cache_hit_rate=self._last_rates[0],
            on_time_rate=self._last_rates[1],
            tok_s=self.clock.rate(now),
            n_tokens=n_tokens,
            budget_mb=(snap.budget_bytes / MIB) if snap else math.nan,
            accounted_weights_mb=(snap.resident_bytes / MIB) if snap else math.nan,
            cache_hits=hits,
            cache_misses=misses,
            on_time=on_time,
            stalls=stalls,
            shard_states=snap.states if snap else (),
            current_layer_pos=snap.current_layer_pos if snap else None,
            emulated_ssd_mb_s=self.streamer.ssd_mb_s if self.streamer else 0.0,
            phase=self.clock.phase,
            expert_hit_rate=expert[0],
            dense_mb_per_token=expert[1],
            expert_mb_per_token=expert[2],
            spec_accuracy=expert[3],
            trunk_resident_mb=trunk_b / MIB,
            expert_cache_mb=cache_b / MIB,
            progress=self.progress.snapshot(read_now) if self.progress is not None else None,
            gpu_mb=gpu_memory_used_mb(),
        )
        self.samples_taken += 1
        for callback in list(self._subscribers):
            callback(sample)
        return sample
