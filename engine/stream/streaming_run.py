"""One streaming run, start to finish: plan → load → cold start → generate → summary.

The CLI, the benches and the GUI worker all drive runs through this class, so what
the window charts is exactly what ``shardscope bench`` writes. ``apply`` changes the
knobs declared live (engine.knobs) between tokens, safely from another thread while
``run()`` is generating.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import deque
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from shardscope.engine.base import memory_calls
from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.base.errors import RunStopped, ShardscopeError
from shardscope.engine.stream.file_guard import ModelFileGuard
from shardscope.engine.knobs.knobs import LIVE, changed
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.measure.metrics import MetricsSample, MetricsSampler, TokenClock, process_read_bytes
from shardscope.engine.measure.phase_progress import PhaseProgress
from shardscope.engine.stream.load_progress import LoadWatch
from shardscope.engine.stream.residency import ResidencyController, require_budget
from shardscope.engine.stream.round_loop import rounds, start_sampling
from shardscope.engine.knobs.settings import RunSettings, validate
from shardscope.engine.layout.shard_plan import ShardPlan, plan_shards
from shardscope.engine.base.units import MIB, mb_per_s


@dataclass
class RunSummary:
    """One CSV row: names follow llama-bench where they overlap."""

    model_filename: str
    model_size_mb: float
    n_layers: int
    n_shards: int
    n_threads: int
    n_gpu_layers: int  # effective: 0 when this llama.cpp build cannot offload
    n_gpu_layers_requested: int
    shard_mb: float
    prefetch_depth: int
    budget_mb: float
    policy: str
    emulated_ssd_mb_s: float
    n_prompt: int
    n_gen: int
    ttft_ms: float
    avg_ts: float
    stddev_ts: float
    peak_rss_mb: float
    resident_weights_mb: float  # peak of the model's bytes in RAM while generating (mincore)
    read_mb_per_token: float  # /proc/self/io read_bytes per decoded token
    streamed_mb_per_token: float  # what the controller loaded per decoded token
    ssd_mb_s: float  # 10^6 B/s: read_bytes over the decode phase's wall time
    cache_hit_rate: float  # fraction of layer-shard accesses with no disk read, decoded tokens only
    on_time_rate: float  # fraction of them resident when compute arrived (the rest stalled)
    cache_hits: int
    cache_misses: int
    stalls: int
    wait_ms_per_token: float  # decode time spent waiting for loads
    llama_eval_ms_per_token: float  # llama.cpp's own perf counter, cross-check
    globals_mb: float
    pinned_mb: float
    load_mechanism: str
    evict_mechanism: str
    stopped: bool = False
    text: str = ""
    device: str = ""
    projected_ts: float = math.nan
    projected_bound: str = ""

    @staticmethod
    def columns() -> list[str]:
        return [f for f in RunSummary.__dataclass_fields__ if f != "text"]

    def row(self) -> dict:
        return {k: getattr(self, k) for k in self.columns()}


def _reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_bytes(proc: psutil.Process) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return proc.memory_info().rss


def min_budget_mb(plan: ShardPlan, settings: RunSettings) -> float:
    """The smallest budget ``settings`` can run ``plan`` with (what apply and planning check)."""
    return plan.min_budget_bytes(settings.prefetch_depth) / MIB


def prepare_plan(settings: RunSettings) -> tuple[str, ShardPlan]:
    """Everything that can be refused before the (slow) model load."""
    validate(settings)
    path = resolve_model_path(settings.model_path)
    layout = load_layout(path)
    gpu_layers = 0
    if settings.n_gpu_layers > 0:
        from shardscope.engine.stream.llama_session import gpu_offload_supported

        gpu_layers = settings.n_gpu_layers if gpu_offload_supported() else 0
    plan = plan_shards(layout, settings.shard_mb, gpu_layers=gpu_layers)
    require_budget(plan, settings.budget_mb, settings.prefetch_depth)
    return path, plan


class StreamingRun:
    def __init__(self, settings: RunSettings, *, sample_interval_s: float = 0.1,
                 on_sample: Callable[[MetricsSample], None] | None = None,
                 on_token: Callable[[int, str, float], None] | None = None,
                 on_phase: Callable[[str], None] | None = None):
        self.settings = settings
        self.model_path, self.plan = prepare_plan(settings)
        self._apply_lock = threading.Lock()
        self.on_token = on_token
        self.on_phase = on_phase
        self.clock = TokenClock()
        self._stop = threading.Event()
        self._samples: list[MetricsSample] = []
        self._on_sample = on_sample
        self._sample_interval = sample_interval_s
        self.session = None
        self.controller: ResidencyController | None = None
        self.sampler: MetricsSampler | None = None
        self._fd: int | None = None
        self.guard: ModelFileGuard | None = None
        self.mapping = None
        self.progress = PhaseProgress()  # the load's and the prompt pass's, for the status bar and CLI line
        # Bounded: a GUI run can go on for hours; the timeline keeps the last 10 minutes.
        self.samples: deque[MetricsSample] = deque(maxlen=6000)

    # ------------------------------------------------------------ control
    def stop(self) -> None:
        self._stop.set()
        if self.controller:
            self.controller.close_waits()

    def _should_stop(self) -> bool:
        """Stop pressed, or the guard / a load failed (then run() raises its message)."""
        return self._stop.is_set() or (self.controller is not None and self.controller.error is not None)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def apply(self, new: RunSettings) -> str:
        """The one way to change a running run: "live" when applied between tokens,
        "restart" when a changed knob needs a new plan or load (nothing is applied here:
        the caller starts a new run). Raises ShardscopeError, changing nothing, when
        the whole new set is refused (checked once, before any knob moves)."""
        new = validate(new)
        with self._apply_lock:
            old = self.settings
            keys = changed(old, new)
            if any(k not in LIVE for k in keys):
                return "restart"
            if "budget_mb" in keys and self._run_kind_changes(old, new):
                return "restart"
            require_budget(self.plan, new.budget_mb, new.prefetch_depth)
            self.settings = new
            c = self.controller
            if c is not None:
                # Each controller setter checks its own pair, so move the budget first
                # when it grows and last when it shrinks: every step in between fits.
                grow = new.budget_mb >= old.budget_mb
                if grow and "budget_mb" in keys:
                    c.set_budget(new.budget_mb)
                if "prefetch_depth" in keys:
                    c.set_prefetch_depth(new.prefetch_depth)
                if not grow:
                    c.set_budget(new.budget_mb)
                if "policy" in keys:
                    c.set_policy(new.policy)
                if "ssd_mb_s" in keys:
                    c.set_ssd_mb_s(new.ssd_mb_s)
            if self.session is not None:
                if "threads" in keys:
                    self.session.set_threads(new.threads)
                if "budget_mb" in keys and self.plan.host_bytes > new.budget_mb * MIB:
                    self.session.request_layer_hook()
            return "live"

    def _run_kind_changes(self, old: RunSettings, new: RunSettings) -> bool:
        """An MoE model whose new budget no longer holds it streams experts instead: a new run (open_run)."""
        from shardscope.engine.layout.moe_layout import read_moe_layout, streams_experts

        moe = read_moe_layout(load_layout(self.model_path))
        return streams_experts(moe, new.budget_mb) != streams_experts(moe, old.budget_mb)

    # ------------------------------------------------------------ the run
    def _phase(self, name: str) -> None:
        self.clock.phase = name
        if self.on_phase:
            self.on_phase(name)

    def load(self) -> None:
        from shardscope.engine.stream.llama_session import LlamaSession  # llama.cpp loads only when needed

        s = self.settings
        if self._stop.is_set():
            raise RunStopped(f"{self.model_path}: stopped before the load")
        self._phase("loading")
        fits = self.plan.host_bytes <= s.budget_mb * MIB
        # The guard goes first: from here on nobody can shrink the file under the mapping.
        try:
            self._fd = os.open(self.model_path, os.O_RDONLY)
        except OSError as exc:
            raise ShardscopeError(f"{self.model_path}: cannot open ({exc.strerror})") from None
        self.guard = ModelFileGuard(self.model_path, self._fd, os.fstat(self._fd).st_size)
        expected = load_layout(self.model_path).file_size
        if self.guard.expected_size != expected:
            raise ShardscopeError(f"{self.model_path}: file changed since its layout was read")
        proc = psutil.Process()
        watch = LoadWatch(self.progress, self._stop, file_bytes=self.guard.expected_size, ssd_mb_s=s.ssd_mb_s,
                          read_bytes=lambda: process_read_bytes(proc))
        try:
            self.session = LlamaSession(self.model_path, n_threads=s.threads, n_gpu_layers=s.n_gpu_layers,
                                        n_ctx=s.n_ctx, layer_hook=self._on_layer, hook_from_start=not fits,
                                        load_progress=watch)
        finally:
            self.progress.end(completed=self.session is not None, read_bytes=process_read_bytes(proc))
        self.mapping = memory_calls.find_mapping(self.model_path)
        self.controller = ResidencyController(self.plan, self.mapping, self._fd, s.budget_mb,
                                              s.prefetch_depth, s.policy, s.ssd_mb_s, guard=self.guard)

    def session_hook_active_after_load(self) -> bool:
        """Whether layers are hooked (False while the whole model fits its budget)."""
        if self.session is None:
            self.load()
        return self.session.hook_active

    def _on_layer(self, layer_number: int) -> bool:
        controller = self.controller
        if controller is None:
            return True
        pos = self._layer_pos.get(layer_number, layer_number)
        self.progress.at_layer(pos)
        return controller.on_layer(pos)

    def run(self, continuous: bool = False,
            on_summary: Callable[[RunSummary], None] | None = None) -> RunSummary:
        """Load (unless loaded), stream-generate ``n_gen`` tokens, return the summary.

        ``continuous`` repeats rounds of ``n_gen`` tokens (the context restarts from
        the prompt each round, the weights stay as streaming left them) until
        ``stop()``: the GUI's Run button and the soak bench work this way. Each round's
        summary goes to ``on_summary``.
        """
        self._layer_pos = {layer: pos for pos, layer in enumerate(self.plan.layers)}
        # From the moment the run starts: the load and the prompt pass are charted too.
        self.sampler = MetricsSampler(self.controller, self.mapping, self.clock, self._sample_interval,
                                      progress=self.progress, model_path=self.model_path)
        start_sampling(self.sampler, self.samples, self._on_sample)
        try:
            if self.session is None:
                self.load()
            self.sampler.attach(self.controller, self.mapping)
            self._phase("cold start")
            self.controller.start()
            return rounds(self._round, continuous=continuous, on_summary=on_summary, stop=self._stop)
        finally:
            self.sampler.stop()
            self._phase("done")

    def _round(self) -> RunSummary:
        s = self.settings
        proc = psutil.Process()
        _reset_peak_rss()
        round_start = time.perf_counter()
        marks: dict[str, tuple] = {}

        def on_token(index: int, token: int, piece: bytes, dt: float) -> None:
            now = time.perf_counter()
            if not self.session.hook_active:
                self.controller.count_resident_pass()
            if index == 0:
                self.progress.end(completed=True, read_bytes=process_read_bytes(proc))
                c = self.controller.snapshot().counters
                marks["first"] = (process_read_bytes(proc), c.loaded_bytes, c.cache_hits, c.cache_misses,
                                  c.stalls, c.wait_s)
                marks["first_t"] = now
                self._phase("generating")
            else:
                self.clock.record(now, dt)
            if self.on_token:
                self.on_token(index, piece.decode("utf-8", "replace"), dt)

        self._phase("prompt")
        self.progress.begin("prompt", n_layers=len(self.plan.layers), read_bytes=process_read_bytes(proc),
                            bytes_from_reads=True)
        try:
            result = self.session.generate(s.prompt, s.n_gen, temperature=s.temperature, seed=s.seed,
                                           on_token=on_token, should_stop=self._should_stop)
        except Exception as exc:
            if self.controller.error:
                raise ShardscopeError(self.controller.error) from None
            if isinstance(exc, ShardscopeError):
                raise
            if self._stop.is_set():
                raise RunStopped("run stopped") from None
            raise ShardscopeError(f"{self.model_path}: generation failed ({exc})") from None
        finally:
            self.progress.end()
        if not result.tokens and self._stop.is_set():  # stopped in the prompt pass: no round to report
            raise RunStopped("run stopped in the prompt pass")
        if self.controller.error:
            raise ShardscopeError(self.controller.error)
        end_read = process_read_bytes(proc)
        end_t = time.perf_counter()
        snap = self.controller.snapshot()
        # Steady-state figures count decoded tokens only: the prompt pass computes
        # several tokens per layer, which gives prefetch time no phone decode has.
        c = snap.counters
        read0, loaded0, hits0, misses0, stalls0, wait0 = marks.get(
            "first", (end_read, c.loaded_bytes, c.cache_hits, c.cache_misses, c.stalls, c.wait_s))
        hits, misses, stalls = c.cache_hits - hits0, c.cache_misses - misses0, c.stalls - stalls0
        n_decoded = len(result.token_s)
        decode_s = sum(result.token_s)
        rates = [1.0 / d for d in result.token_s if d > 0]
        per_tok = max(n_decoded, 1)
        accesses = hits + misses
        # list() copies in one step under the GIL; iterating the deque itself races the
        # sampler thread's appends ("deque mutated during iteration", found by the soak).
        since = round_start - self.sampler._t0
        gen_samples = [x for x in list(self.samples) if x.phase == "generating" and x.t_s >= since]
        return RunSummary(
            model_filename=Path(self.model_path).name,
            model_size_mb=round(os.path.getsize(self.model_path) / MIB, 2),
            n_layers=len(self.plan.layers),
            n_shards=len(self.plan.shards),
            n_threads=self.settings.threads,
            n_gpu_layers=self.session.n_gpu_layers,
            n_gpu_layers_requested=s.n_gpu_layers,
            shard_mb=s.shard_mb,
            prefetch_depth=self.controller.prefetch_depth,
            budget_mb=self.controller.budget_bytes / MIB,
            policy=self.controller.policy,
            emulated_ssd_mb_s=self.controller.ssd_mb_s,
            n_prompt=result.prompt_tokens,
            n_gen=len(result.tokens),
            ttft_ms=round(result.ttft_s * 1000, 2),
            avg_ts=round(n_decoded / decode_s, 3) if decode_s > 0 else 0.0,
            stddev_ts=round(statistics.pstdev(rates), 3) if len(rates) > 1 else 0.0,
            peak_rss_mb=round(_peak_rss_bytes(proc) / MIB, 1),
            resident_weights_mb=round(max(x.resident_weights_mb for x in gen_samples), 1) if gen_samples else math.nan,
            read_mb_per_token=round((end_read - read0) / MIB / per_tok, 2),
            streamed_mb_per_token=round((snap.counters.loaded_bytes - loaded0) / MIB / per_tok, 2),
            # Over wall time, not decode time: a budget cut replays the context between
            # tokens, and its reads must not be divided by time that leaves it out.
            ssd_mb_s=round(mb_per_s(end_read - read0, end_t - marks.get("first_t", end_t)), 1),
            cache_hit_rate=round(hits / accesses, 4) if accesses else math.nan,
            on_time_rate=round((accesses - stalls) / accesses, 4) if accesses else math.nan,
            cache_hits=hits,
            cache_misses=misses,
            stalls=stalls,
            wait_ms_per_token=round((c.wait_s - wait0) * 1000 / per_tok, 2),
            llama_eval_ms_per_token=round(result.perf["t_eval_ms"] / max(result.perf["n_eval"], 1), 2),
            globals_mb=round(self.plan.globals_bytes / MIB, 1),
            pinned_mb=round(sum(self.plan.shards[i].n_bytes for i in self.controller.pinned) / MIB, 1),
            load_mechanism=self.controller.load_mechanism,
            evict_mechanism=self.controller.evict_mechanism,
            stopped=result.stopped,
            text=result.text,
        )

    def close(self) -> None:
        if self.sampler:
            self.sampler.stop()
        if self.controller:
            self.controller.close()
        if self.session:
            self.session.close()
            self.session = None
        if self.guard is not None:
            self.guard.release()  # only now, with the mapping gone, may a writer proceed
            self.guard = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "StreamingRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
