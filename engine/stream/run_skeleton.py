"""What every run does, whatever it streams: load, guard the file, phases, rounds, stop, close, summary.

A dense run (StreamingRun: layer shards) and an expert run (ExpertRun: routed experts)
differ only in their streamer — what it loads and evicts, its counters, what it can
change live. Everything else lives here once, so the two cannot drift apart again:

- the model file is opened and leased first, and checked against the layout the run
  was planned from (a file swapped between planning and load is refused);
- one watcher thread polls the file guard every GUARD_POLL_S for both kinds (a layer
  boundary is not a clock: an expert run waiting on a load would not look);
- any failure — guard, streamer, llama.cpp — ends the round with one message, never a
  row computed from aborted graphs;
- the summary divides every figure one way: rates over the decode phase's wall time,
  per-token figures over decoded tokens, hit rates over the bytes the tokens needed;
- the sampler runs from the start of ``run()``, so the load and the prompt pass are
  charted too, and ``progress`` says how far each of them got (bytes, rate, layer, ETA);
- Stop (and the CLI's Ctrl-C) ends every phase within a second: the load through its
  progress callback (engine/stream/load_progress.py), the prompt pass through llama.cpp's
  abort callback, decoding at the next layer; a phase cut short raises RunStopped and
  no round is reported from it.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

import psutil

from shardscope.engine.base import platform_calls
from shardscope.engine.base.errors import RunStopped, ShardscopeError
from shardscope.engine.base.units import MIB, mb_per_s
from shardscope.engine.knobs.knobs import KNOBS, changed
from shardscope.engine.knobs.settings import RunSettings, validate
from shardscope.engine.measure.compute_window import ComputeWindow, RoundTokens
from shardscope.engine.measure.metrics import MetricsSample, MetricsSampler, TokenClock, process_read_bytes
from shardscope.engine.measure.phase_progress import PhaseProgress
from shardscope.engine.measure.round_peaks import RoundPeaks
from shardscope.engine.stream import io_path
from shardscope.engine.stream.file_guard import ModelFileGuard
from shardscope.engine.stream.load_progress import LoadWatch

GUARD_POLL_S = 0.02  # the file guard's promise, for both run kinds: checked ≤ 20 ms apart
TIMELINE_SAMPLES = 6000  # the CLI's timeline and --verify: the last 10 minutes of samples


def share(part: float, whole: float) -> float:
    """part ÷ whole as a 4-decimal fraction; NaN when nothing was needed (not an assumed 100 %)."""
    return round(part / whole, 4) if whole > 0 else math.nan


def reset_peak_rss() -> None:
    """A new peak RSS for the round where the system can reset it (Linux); macOS keeps the process's."""
    platform_calls.reset_peak_rss()


def peak_rss_bytes(proc: psutil.Process) -> int:
    peak = platform_calls.peak_rss_bytes()
    return peak if peak is not None else proc.memory_info().rss


def start_sampling(sampler, samples, on_sample: Callable | None) -> None:
    """Start ``sampler`` feeding ``samples`` and ``on_sample``: before the load, so the
    charts hold the load and the prompt pass too, not only what follows the first token."""
    sampler.subscribe(samples.append)
    if on_sample:
        sampler.subscribe(on_sample)
    sampler.start()


def rounds(one_round: Callable, *, continuous: bool, on_summary: Callable | None, stop: threading.Event):
    """One round, or while ``continuous`` until ``stop`` is set; each summary goes to
    ``on_summary`` and the last one is returned."""
    while True:
        summary = one_round()
        if on_summary:
            on_summary(summary)
        if not continuous or stop.is_set():
            return summary


class RunSkeleton:
    """The run both kinds share; a subclass supplies its streamer through the hooks below.

    Hooks: ``_open_session`` (llama.cpp with the kind's callbacks), ``_open_streamer`` (its
    ``snapshot().counters`` are ResidencyCounters for both kinds), ``_start_streamer``,
    ``_halt_streamer``, ``_token_done`` (per-token bookkeeping on the decode thread), ``_summary`` (the row),
    ``_fits`` (refuse a new settings set), and a ``set_<knob>`` method per live knob it
    takes (engine/knobs/knobs.py: each knob names its setter).
    """

    streams = ""  # "layers" or "experts": which knobs with ``streams`` set this run takes
    apply_between_tokens = False  # True: live changes wait for the decode thread's next token boundary

    def __init__(self, settings: RunSettings, model_path: str, layout, *, sample_interval_s: float = 0.1,
                 on_sample: Callable[[MetricsSample], None] | None = None,
                 on_token: Callable[[int, str, float], None] | None = None,
                 on_phase: Callable[[str], None] | None = None):
        self.settings = settings
        self.model_path = model_path
        self.layout = layout  # what the run was planned from: the file must still be this one at load
        self.on_token = on_token  # (token index in the round, its text, seconds)
        self.on_phase = on_phase
        self.clock = TokenClock()
        self.samples: deque[MetricsSample] = deque(maxlen=TIMELINE_SAMPLES)
        self._peaks = RoundPeaks()  # the round's figures come from these, not from ``samples``
        self._on_sample = on_sample
        self._sample_interval = sample_interval_s
        self._apply_lock = threading.Lock()
        self._pending: RunSettings | None = None
        self._compute = ComputeWindow()  # the settings' compute per token, from the recent tokens
        self._stop = threading.Event()
        self._running = threading.Event()  # clear: paused at the next token boundary (pause())
        self._running.set()
        self._error: str | None = None
        self._started = False
        self.session = None
        self.streamer = None
        self.sampler: MetricsSampler | None = None
        self.mapping = None
        self.slots = None  # own slots of a model mapped without reading it (load): mremap or portable
        self.io_path = io_path.PAGE_CACHE  # which I/O path streams the weights (engine/stream/io_path.py)
        self.io_note = ""  # why a streamed model goes through the page cache instead, if it does
        self.guard: ModelFileGuard | None = None
        self._fd: int | None = None
        self._watch_stop = threading.Event()
        self._watch: threading.Thread | None = None
        self.progress = PhaseProgress()  # the load's and the prompt pass's: status bar, CLI line
        self._load_watch: LoadWatch | None = None  # the kinds hand it to LlamaSession(load_progress=)

    # ------------------------------------------------------------ control
    def keep_samples(self, n: int) -> None:
        """Keep only the last ``n`` samples in ``samples`` (before ``run``): for a caller that
        stores each sample itself, as the window's timeline does; the CLI keeps TIMELINE_SAMPLES."""
        self.samples = deque(self.samples, maxlen=max(1, n))

    def stop(self) -> None:
        self._stop.set()
        if self.streamer is not None:
            self._halt_streamer()

    def pause(self, paused: bool = True) -> None:
        """Hold the decode at the next token boundary (False: go on); Stop still ends it at once."""
        (self._running.clear if paused else self._running.set)()

    def _hold(self) -> float:
        """Wait here while paused; the seconds waited (the decode thread, between two tokens)."""
        if self._running.is_set():
            return 0.0
        start, phase = time.perf_counter(), self.clock.phase
        self._phase("paused")  # no token in flight: the live rate is not bent down by the pause
        while not self._running.wait(0.05) and not self._should_stop():
            pass
        self._phase(phase)
        return time.perf_counter() - start

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def error(self) -> str | None:
        """Why the run cannot go on (file guard, streamer), or None."""
        if self._error is None and self.streamer is not None and self.streamer.error:
            self._error = self.streamer.error
        return self._error

    def _should_stop(self) -> bool:
        """Stop pressed, or the guard / a load failed (then the round raises its message)."""
        return self._stop.is_set() or self.error is not None

    def apply(self, new: RunSettings) -> str:
        """The one way to change a running run: "live" when its streamer takes every changed
        knob (now, or at the next token boundary), "restart" when one needs a new plan or
        load (nothing is applied: the caller starts a new run). Raises ShardscopeError,
        changing nothing, when the whole new set is refused (checked before any knob moves)."""
        new = validate(new)
        with self._apply_lock:
            keys = changed(self.settings, new)
            if any(not self._takes_live(k) for k in keys) or self._restart_needed(self.settings, new, keys):
                return "restart"
            self._fits(new)
            if self.apply_between_tokens and self.session is not None:
                self._pending = new
            else:
                self._take(new)
            return "live"

    def _takes_live(self, key: str) -> bool:
        spec = KNOBS[key]
        return spec.live or (spec.streams not in ("", self.streams))  # another kind's knob: nothing to change

    def _restart_needed(self, old: RunSettings, new: RunSettings, keys: list[str]) -> bool:
        return False

    def _take(self, new: RunSettings) -> None:
        """Move the running run to ``new``: one setter call per changed knob this kind takes.

        A growing budget moves first and a shrinking one last, so every step in between fits."""
        old, self.settings = self.settings, new
        if old != new:
            self._compute.clear()  # its tokens measured the old settings
        keys = [k for k in changed(old, new) if KNOBS[k].setter and KNOBS[k].streams in ("", self.streams)]
        grow = new.budget_mb >= old.budget_mb
        keys.sort(key=lambda k: 0 if k != "budget_mb" else (-1 if grow else 1))
        for key in keys:
            getattr(self, KNOBS[key].setter)(getattr(new, key))

    def _take_pending(self) -> None:
        with self._apply_lock:
            new, self._pending = self._pending, None
            if new is not None:
                self._take(new)

    def set_threads(self, threads: int) -> None:
        if self.session is not None:
            self.session.set_threads(threads)

    # ------------------------------------------------------------ load
    def _phase(self, name: str) -> None:
        self.clock.phase = name
        if self.on_phase:
            self.on_phase(name)

    def load(self) -> None:
        from shardscope.engine.base import memory_calls

        if self._stop.is_set():
            raise RunStopped(f"{self.model_path}: stopped before the load")
        self._phase("loading")
        # The guard goes first: from here on nobody can shrink the file under the mapping.
        try:
            self._fd = os.open(self.model_path, os.O_RDONLY)
        except OSError as exc:
            raise ShardscopeError(f"{self.model_path}: cannot open ({exc.strerror})") from None
        stat = os.fstat(self._fd)
        self.guard = ModelFileGuard(self.model_path, self._fd, stat.st_size)
        if (stat.st_size, stat.st_mtime_ns) != (self.layout.file_size, self.layout.mtime_ns):
            raise ShardscopeError(f"{self.model_path}: file changed since its layout was read (run planned for "
                                  f"{self.layout.file_size} bytes, the file now has {stat.st_size})")
        self._watch = threading.Thread(target=self._watch_file, name="shardscope-file-guard", daemon=True)
        self._watch.start()
        proc = psutil.Process()
        self._load_watch = LoadWatch(self.progress, self._stop, file_bytes=stat.st_size,
                                     ssd_mb_s=self.settings.ssd_mb_s, read_bytes=lambda: process_read_bytes(proc))
        try:
            self.session = self._open_session()
        finally:
            self.progress.end(completed=self.session is not None, read_bytes=process_read_bytes(proc))
            self._load_watch = None
        self.mapping = memory_calls.find_mapping(self.model_path)
        self.slots, self.io_note = self._own_slots()
        self.io_path = io_path.path_of(self.slots)
        self.streamer = self._open_streamer()

    def _own_slots(self):
        """(own slots, "") for a model mapped without reading it, else (None, why not): such a model
        streams through our own pages, not the page cache — by mremap (direct_slots.py) or the
        portable path (portable_slots.py), as engine/stream/io_path.py chooses."""
        if not getattr(self.session, "lazy_load", False) or self.mapping is None:
            return None, getattr(self.session, "load_note", "")
        slots = io_path.open_slots(self.model_path, self.mapping)
        return (None, slots) if isinstance(slots, str) else (slots, "")

    def _watch_file(self) -> None:
        """Poll the guard until close; a problem halts the streamer so the decode returns at once."""
        while not self._watch_stop.wait(GUARD_POLL_S):
            problem = self.guard.problem() if self.guard is not None else None
            if problem:
                self._error = self._error or problem
                if self.streamer is not None:
                    self._halt_streamer()
                return

    # ------------------------------------------------------------ the run
    def run(self, continuous: bool = False, on_summary: Callable | None = None):
        """Load (unless loaded), generate ``n_gen`` tokens, return the summary.

        ``continuous`` repeats rounds of ``n_gen`` tokens (the context restarts from the
        prompt each round, the weights stay as streaming left them) until ``stop()``: the
        window's Run button and the soak bench work this way. Each summary goes to ``on_summary``.
        """
        # From the moment the run starts (the window's Run, the CLI's bench): the load and
        # the prompt pass are charted too; its baselines count the cold-start loads as well.
        self.sampler = MetricsSampler(self.streamer, self.mapping, self.clock, self._sample_interval,
                                      progress=self.progress, model_path=self.model_path)
        self.sampler.subscribe(self._peaks.take)
        start_sampling(self.sampler, self.samples, self._on_sample)
        try:
            if self.session is None:
                self.load()
            self.sampler.attach(self.streamer, self.mapping)
            self._phase("cold start")
            if not self._started:
                self._start_streamer()
                self._started = True
            return rounds(self._round, continuous=continuous, on_summary=on_summary, stop=self._stop)
        finally:
            self.sampler.stop()
            self._phase("done")

    def _round(self):
        s = self.settings
        proc = psutil.Process()
        reset_peak_rss()
        round_start = time.perf_counter()
        self._peaks.begin(round_start - self.sampler._t0)
        self._begin_round()
        marks: dict = {"tokens": RoundTokens()}  # per-token waits and CPU (the projection's compute)

        def on_token(index: int, token: int, piece: bytes, dt: float) -> None:
            now = marks["last_t"] = time.perf_counter()
            self._token_done(index, proc)
            marks["tokens"].token(self._tally().wait_s)
            if index == 0:
                self.progress.end(completed=True, read_bytes=process_read_bytes(proc))
                marks["first"] = (process_read_bytes(proc), self._tally(), now)
                self._phase("generating")
            else:
                self.clock.record(now, dt)
            if self.apply_between_tokens:
                self._take_pending()
            if self.on_token:
                self.on_token(index, piece.decode("utf-8", "replace"), dt)
            if index < s.n_gen - 1:  # a pause after the last token would fall outside first..last
                held = self._hold()
                if held:  # the round's wall time from its first token leaves the pause out
                    read0, tally0, t_first = marks["first"]
                    marks["first"] = (read0, tally0, t_first + held)
            # last: reads it starts (hash prefetch) fall after every per-token mark, ours and a watcher's
            self._token_sampled(index, token)

        self._phase("prompt")
        # The layer hooks say which layer the prompt pass is at; its bytes are the kernel's reads.
        self.progress.begin("prompt", n_layers=self.layout.n_layers, read_bytes=process_read_bytes(proc),
                            bytes_from_reads=True, total_bytes=self._prompt_bytes())
        try:
            result = self.session.generate(s.prompt, s.n_gen, temperature=s.temperature, seed=s.seed,
                                           on_token=on_token, should_stop=self._should_stop)
        except Exception as exc:
            self._check_file()
            if self.error:
                raise ShardscopeError(self.error) from None
            if isinstance(exc, ShardscopeError):
                raise
            if self._stop.is_set():
                raise RunStopped("run stopped") from None
            raise ShardscopeError(f"{self.model_path}: generation failed ({exc})") from None
        finally:
            self.progress.end()
        self._check_file()  # a change in the last poll interval must not pass either
        if self.error:
            # Graphs the streamer aborted computed garbage: no row from them.
            raise ShardscopeError(self.error)
        if not result.tokens and self._stop.is_set():  # stopped in the prompt pass: no round to report
            raise RunStopped("run stopped in the prompt pass")
        self._end_round(result)
        summary = self._summary(result, self._figures(result, proc, marks, round_start))
        marks["tokens"].attach(summary, result.token_s, marks.get("first", (0, 0, None))[2], marks.get("last_t"),
                               self._compute)
        return summary

    def _check_file(self) -> None:
        problem = self.guard.problem() if self.guard is not None else None
        if problem and self._error is None:
            self._error = problem

    def _figures(self, result, proc: psutil.Process, marks: dict, round_start: float) -> dict:
        """The row's figures both kinds share, each divided one way (decoded tokens only:
        the prompt pass computes several tokens per layer, which no phone decode has)."""
        end_read, end_t, end = process_read_bytes(proc), time.perf_counter(), self._tally()
        read0, tally0, t_first = marks.get("first", (end_read, end, end_t))
        d = end.since(tally0)
        n_decoded = len(result.token_s)
        per_tok = max(n_decoded, 1)
        decode_s = sum(result.token_s)
        rates = [1.0 / x for x in result.token_s if x > 0]
        peaks = self._peaks
        if not peaks.count and n_decoded and self.sampler is not None:
            # Tokens faster than the sampler's interval: one reading now, still in "generating",
            # so the row's peak is measured, never missing.
            peaks = RoundPeaks.reading(self.sampler.sample())
        read = end_read - read0
        return dict(
            model_filename=Path(self.model_path).name,
            model_size_mb=round(self.guard.expected_size / MIB, 2),  # the file the run read, not the path's now
            n_threads=self.settings.threads,
            n_prompt=result.prompt_tokens,
            n_gen=len(result.tokens),
            ttft_ms=round(result.ttft_s * 1000, 2),
            avg_ts=round(n_decoded / decode_s, 3) if decode_s > 0 else 0.0,
            stddev_ts=round(statistics.pstdev(rates), 3) if len(rates) > 1 else 0.0,
            peak_rss_mb=round(peak_rss_bytes(proc) / MIB, 1),
            resident_weights_mb=round(peaks.resident_weights_mb, 1) if peaks.count else math.nan,
            gpu_mb=round(peaks.gpu_mb, 1) if peaks.count else 0.0,
            read_mb_per_token=round(read / MIB / per_tok, 3),
            streamed_mb_per_token=round(d.loaded_bytes / MIB / per_tok, 3),
            # Over wall time, not decode time: a budget cut replays the context between
            # tokens, and its reads must not be divided by time that leaves it out.
            # ... from the first token to the last (not to the round's end: closing the round,
            # stopping the sampler among it, is no reading time; --verify's outside clock runs
            # between the same two tokens)
            ssd_mb_s=round(mb_per_s(read, marks.get("last_t", end_t) - t_first), 1),
            cache_hit_rate=share(d.hit_bytes, d.needed_bytes),
            on_time_rate=share(d.on_time_bytes, d.needed_bytes),
            cache_hits=d.cache_hits,
            cache_misses=d.cache_misses,
            stalls=d.stalls,
            wait_ms_per_token=round(d.wait_s * 1000 / per_tok, 2),
            llama_eval_ms_per_token=round(result.perf["t_eval_ms"] / max(result.perf["n_eval"], 1), 2),
            stopped=result.stopped,
            io_path=self.io_path,
            text=result.text,
            decode_s=decode_s,  # not a column: the kinds' own per-token figures divide it
        )

    def _tally(self):
        """The streamer's running totals (ResidencyCounters, the same shape for both kinds)."""
        return self.streamer.snapshot().counters

    @staticmethod
    def forward(method: str):
        """A ``set_<knob>`` that hands the new value to the streamer's ``method`` (nothing before load)."""
        def setter(self, value) -> None:
            if self.streamer is not None:
                getattr(self.streamer, method)(value)
        return setter

    # ------------------------------------------------------------ the kind's hooks
    def _prompt_bytes(self) -> int:
        """Bytes the prompt pass will have to read, where the kind knows them (0: unknown)."""
        return 0

    def _begin_round(self) -> None:
        pass

    def _token_sampled(self, index: int, token: int) -> None:
        """``token`` was just sampled and is the next decode's input (an expert run prefetches what its
        id routes to: engine/experts/hash_prefetch.py); nothing for a dense run."""

    def _token_done(self, index: int, proc: psutil.Process) -> None:
        pass

    def _end_round(self, result) -> None:
        pass

    # ------------------------------------------------------------ close
    def close(self) -> None:
        self._watch_stop.set()
        if self._watch is not None:
            self._watch.join(timeout=2)
            self._watch = None
        if self.sampler:
            self.sampler.stop()
        if self.streamer is not None:
            self.streamer.close()  # loaders stop before the model's mapping goes
        if self.session:
            self.session.close()
            self.session = None
        self._close_extras()
        if self.guard is not None:
            self.guard.release()  # only now, with the mapping gone, may a writer proceed
            self.guard = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _close_extras(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["RunSkeleton", "GUARD_POLL_S", "share", "start_sampling", "rounds", "reset_peak_rss",
           "peak_rss_bytes"]
