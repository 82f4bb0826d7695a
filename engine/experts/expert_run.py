"""One MoE run with expert streaming: plan → load → cold start → generate → summary.

The MoE counterpart of StreamingRun (same summary row, sampler and timeline, plus the
expert columns): dense weights stay resident, routed experts stream through an expert
cache under the rest of the budget (engine/experts/expert_streaming.py). engine/runs/run_factory.py
picks it for MoE models that do not fit their budget, or when a routing trace is asked for.
It has StreamingRun's surface (continuous rounds, stop, apply, samples) so the window,
bench, sweep and tune drive either alike.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import psutil

from shardscope.engine.base import memory_calls
from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.base.errors import RunStopped, ShardscopeError
from shardscope.engine.experts.expert_streaming import HEAT_WINDOW, ExpertStreamer, min_cache_bytes
from shardscope.engine.experts.expert_view import ExpertView
from shardscope.engine.stream.file_guard import ModelFileGuard
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.measure.metrics import MetricsSample, MetricsSampler, TokenClock, process_read_bytes
from shardscope.engine.measure.phase_progress import PhaseProgress
from shardscope.engine.stream.load_progress import LoadWatch
from shardscope.engine.knobs.knobs import LAYER_KNOBS, LIVE, changed
from shardscope.engine.layout.moe_layout import MoeLayout, read_moe_layout
from shardscope.engine.stream.round_loop import rounds, start_sampling
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceWriter
from shardscope.engine.knobs.settings import RunSettings, validate
from shardscope.engine.stream.streaming_run import RunSummary, _peak_rss_bytes, _reset_peak_rss
from shardscope.engine.base.units import MIB


@dataclass
class ExpertRunSummary(RunSummary):
    """RunSummary's row plus the expert figures (rates are fractions 0..1)."""

    n_expert: int = 0
    n_expert_used: int = 0
    expert_cache_mb: float = 0.0
    expert_policy: str = ""
    expert_speculation: bool = False
    expert_hit_rate: float = math.nan  # resident when its router picked it (a guess loaded in time counts)
    expert_hits: int = 0
    expert_misses: int = 0  # picked experts the decode waited for
    dense_mb_per_token: float = 0.0  # dense bytes streamed per decoded token (they stay resident: 0)
    expert_mb_per_token: float = 0.0  # experts loaded per decoded token (the controller's count)
    expert_wait_ms_per_token: float = 0.0
    compute_ms_per_token: float = 0.0  # decode time not spent waiting for experts
    spec_accuracy: float = math.nan  # guessed experts that their layer then picked
    spec_hidden_share: float = math.nan  # of the would-be misses, the share a guess had loaded in time
    evict_residue_mb: float = 0.0  # what mincore still saw after evictions (then paged out)
    trace_path: str = ""

    @staticmethod
    def columns() -> list[str]:
        return [f for f in ExpertRunSummary.__dataclass_fields__ if f != "text"]


def moe_layout_for(settings: RunSettings) -> MoeLayout | None:
    """The model's expert layout (None: dense); malformed MoE files are refused here."""
    return read_moe_layout(load_layout(resolve_model_path(settings.model_path)))


def cache_bytes_for(moe: MoeLayout, settings: RunSettings) -> int:
    """The expert cache the budget allows, or a one-line refusal naming the flag."""
    budget = int(settings.budget_mb * MIB)
    dense = moe.dense_bytes
    name = Path(moe.path).name
    floor = min_cache_bytes(moe, settings.expert_speculation)
    if settings.expert_cache_mb:
        cache = int(settings.expert_cache_mb * MIB)
        if dense + cache > budget:
            raise ShardscopeError(
                f"--expert-cache-mb {settings.expert_cache_mb}: with {name}'s {dense / MIB:.0f} MB of dense weights "
                f"it exceeds --budget-mb {settings.budget_mb:g} (at most {(budget - dense) / MIB:.0f} MB)")
    else:
        cache = budget - dense
    if settings.n_gpu_layers:
        raise ShardscopeError(f"--n-gpu-layers {settings.n_gpu_layers}: expert streaming of {name} runs on the CPU "
                              f"only (run with 0)")
    if cache < floor:
        raise ShardscopeError(
            f"budget {settings.budget_mb:g} MB leaves {max(cache, 0) / MIB:.0f} MB for experts of {name}; the minimum "
            f"is {floor / MIB:.0f} MB (a prompt may pick all {moe.n_expert} experts of a layer"
            f"{', plus a layer of guesses' if settings.expert_speculation else ''}), i.e. --budget-mb "
            f"{math.ceil((dense + floor) / MIB)}")
    return cache


# What an expert run takes between tokens; the layer-streaming knobs do not apply to it (no shards).
LIVE_KEYS = LIVE | frozenset(LAYER_KNOBS)


class ExpertRun:
    def __init__(self, settings: RunSettings, *, trace_path: str | None = None, sample_interval_s: float = 0.1,
                 on_sample: Callable[[MetricsSample], None] | None = None,
                 on_token: Callable[[int, str, float], None] | None = None,
                 on_phase: Callable[[str], None] | None = None):
        self.settings = validate(settings)
        self.model_path = resolve_model_path(settings.model_path)
        moe = moe_layout_for(settings)
        if moe is None:
            raise ShardscopeError(f"{self.model_path}: not a mixture-of-experts model (no expert tensors)")
        self.moe = moe
        self.cache_bytes = cache_bytes_for(moe, settings)
        self.trace_path = trace_path
        self.on_token = on_token  # (token index in round, its text, seconds): StreamingRun's callbacks
        self.on_phase = on_phase
        self.clock = TokenClock()
        # Bounded like StreamingRun's: a window session can run for hours.
        self.samples: deque[MetricsSample] = deque(maxlen=6000)
        self._apply_lock = threading.Lock()
        self._pending: RunSettings | None = None  # a live change waiting for the next token boundary
        self._token_base = 0  # tokens of earlier rounds, so trace tokens stay distinct across rounds
        self._on_sample = on_sample
        self._sample_interval = sample_interval_s
        self.session = None
        self.streamer: ExpertStreamer | None = None
        self.sampler: MetricsSampler | None = None
        self.mapping = None
        self.guard = None
        self._fd: int | None = None
        self._trace: TraceWriter | None = None
        self._stop = threading.Event()
        self.progress = PhaseProgress()  # the load's and the prompt pass's, for the status bar and CLI line
        self._layer_pos = {layer: pos for pos, layer in enumerate(moe.layers)}
        self._started = False
        self.tokens: list[int] = []
        self.per_token: list[dict] = []  # decoded tokens: read bytes (kernel) vs loaded expert bytes

    def stop(self) -> None:
        self._stop.set()
        if self.streamer:
            self.streamer.stop()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def apply(self, new: RunSettings) -> str:
        """Like StreamingRun.apply: "live" (taken at the next token boundary) or "restart".

        The whole new set is checked once (validation, then the expert cache against the
        budget) before anything moves; a refusal raises ShardscopeError and changes nothing.
        """
        new = validate(new)
        with self._apply_lock:
            keys = changed(self.settings, new)
            if any(k not in LIVE_KEYS for k in keys):
                return "restart"
            cache_bytes_for(self.moe, new)  # refuses, naming the flag
            if self.streamer is None or self.session is None:
                self._take(new)
            else:
                self._pending = new
            return "live"

    def _take(self, new: RunSettings) -> None:
        """Move the running streamer to ``new`` (decode thread between tokens, or before the run)."""
        old, self.settings = self.settings, new
        self.cache_bytes = cache_bytes_for(self.moe, new)
        st = self.streamer
        if st is not None:
            if new.expert_policy != old.expert_policy:
                st.set_policy(new.expert_policy)
            if new.expert_speculation != old.expert_speculation:
                st.set_speculation(new.expert_speculation)
            st.set_cache_bytes(self.cache_bytes, int(new.budget_mb * MIB))
            st.limiter.mb_s = new.ssd_mb_s
        if self.session is not None and new.threads != old.threads:
            self.session.set_threads(new.threads)

    def _take_pending(self) -> None:
        with self._apply_lock:
            new, self._pending = self._pending, None
            if new is not None:
                self._take(new)

    # ------------------------------------------------------------ what the window reads
    def expert_view(self) -> ExpertView:
        """The expert map's state now (a copy; cheap enough to poll at 10 Hz)."""
        layers = tuple(self.moe.layers)
        if self.streamer is None:
            shape = (len(layers), self.moe.n_expert)
            return ExpertView(np.zeros(shape, np.uint8), np.zeros(shape, bool), np.zeros(shape, np.int64),
                              HEAT_WINDOW, None, layers)
        states, picked, heat, row = self.streamer.view_arrays()
        return ExpertView(states, picked, heat, HEAT_WINDOW, row, layers)

    def routing_records(self) -> RoutingTrace:
        """This session's routing so far (also without --trace), as engine/experts/replay.py takes it."""
        records = self.streamer.routing_records() if self.streamer is not None else ()
        return RoutingTrace(self._trace_header(), records)

    def _trace_header(self) -> TraceHeader:
        return TraceHeader(Path(self.model_path).name, self.moe.n_expert, self.moe.n_expert_used,
                           {layer: self.moe.unit_bytes(layer) for layer in self.moe.layers})

    def load(self) -> None:
        from shardscope.engine.stream.llama_session import LlamaSession

        s = self.settings
        if self._stop.is_set():
            raise RunStopped(f"{self.model_path}: stopped before the load")
        self._phase("loading")
        try:
            self._fd = os.open(self.model_path, os.O_RDONLY)
        except OSError as exc:
            raise ShardscopeError(f"{self.model_path}: cannot open ({exc.strerror})") from None
        self.guard = ModelFileGuard(self.model_path, self._fd, os.fstat(self._fd).st_size)
        proc = psutil.Process()
        watch = LoadWatch(self.progress, self._stop, file_bytes=self.guard.expected_size, ssd_mb_s=s.ssd_mb_s,
                          read_bytes=lambda: process_read_bytes(proc))
        try:
            self.session = LlamaSession(self.model_path, n_threads=s.threads, n_ctx=s.n_ctx,
                                        topk_hook=self._on_topk, hook_from_start=True,
                                        norm_hook=self._on_norm if s.expert_speculation else None,
                                        load_progress=watch)
        finally:
            self.progress.end(completed=self.session is not None, read_bytes=process_read_bytes(proc))
        self.mapping = memory_calls.find_mapping(self.model_path)
        if self.mapping is None:
            raise ShardscopeError(f"{self.model_path}: no file mapping found; expert streaming needs Linux mmap")
        if self.trace_path:
            self._trace = TraceWriter(self.trace_path, self._trace_header())
        self.streamer = ExpertStreamer(self.moe, self.mapping, self._fd, budget_bytes=int(s.budget_mb * MIB),
                                       cache_bytes=self.cache_bytes, policy=s.expert_policy,
                                       speculation=s.expert_speculation, trace=self._trace, ssd_mb_s=s.ssd_mb_s)

    def _on_norm(self, layer: int, row) -> None:
        if self.streamer is not None:
            self.streamer.on_norm(layer, row)

    def _on_topk(self, layer: int, ids) -> bool:
        streamer = self.streamer
        if streamer is None:
            return True
        if self.guard is not None and self.guard.problem():
            streamer.stop()
            return False
        self.progress.at_layer(self._layer_pos.get(layer, 0))
        return streamer.on_topk(layer, ids)

    def _phase(self, name: str) -> None:
        self.clock.phase = name
        if self.on_phase:
            self.on_phase(name)

    def run(self, continuous: bool = False,
            on_summary: Callable[[ExpertRunSummary], None] | None = None) -> ExpertRunSummary:
        """Load (unless loaded), generate ``n_gen`` tokens, return the summary.

        ``continuous`` repeats rounds (the context restarts from the prompt, the expert
        cache stays as the last round left it) until ``stop()``, each summary to ``on_summary``.
        """
        # From the moment the run starts: the load and the prompt pass are charted too.
        self.sampler = MetricsSampler(self.streamer, self.mapping, self.clock, self._sample_interval,
                                      progress=self.progress, model_path=self.model_path)
        start_sampling(self.sampler, self.samples, self._on_sample)
        try:
            if self.session is None:
                self.load()
            self.sampler.attach(self.streamer, self.mapping)
            self._phase("cold start")
            if not self._started:
                self.streamer.start()
                self._started = True
            summary = rounds(self._round, continuous=continuous, on_summary=on_summary, stop=self._stop)
        except BaseException:
            if self._trace is not None:
                self._trace.discard()
                self._trace = None
            raise
        finally:
            self.sampler.stop()
            self._phase("done")
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        return summary

    def _round(self) -> ExpertRunSummary:
        self._take_pending()
        s = self.settings
        proc = psutil.Process()
        streamer = self.streamer
        _reset_peak_rss()
        marks: dict = {}
        last = {}
        self.per_token = []
        streamer.begin_prompt()
        base = self._token_base
        streamer.token = base

        def on_token(index: int, token: int, piece: bytes, dt: float) -> None:
            now = time.perf_counter()
            read, c = process_read_bytes(proc), streamer.snapshot_counters()
            if index == 0:
                self.progress.end(completed=True, read_bytes=process_read_bytes(proc))
                streamer.end_prompt()
                marks["first"] = (read, c)
                self._phase("generating")
            else:
                self.clock.record(now, dt)
                read0, c0 = last["at"]
                self.per_token.append({"read_bytes": read - read0, "expert_bytes": c.loaded_bytes - c0.loaded_bytes,
                                       "misses": c.misses - c0.misses, "hits": c.hits - c0.hits,
                                       "wait_s": c.wait_s - c0.wait_s, "dt": dt})
            last["at"] = (read, c)
            self._take_pending()
            streamer.token = base + index + 1
            if self.on_token:
                self.on_token(index, piece.decode("utf-8", "replace"), dt)

        self._phase("prompt")
        self.progress.begin("prompt", n_layers=len(self.moe.layers), read_bytes=process_read_bytes(proc),
                            bytes_from_reads=True)
        try:
            result = self.session.generate(s.prompt, s.n_gen, temperature=s.temperature, seed=s.seed,
                                           on_token=on_token, should_stop=self._stop.is_set)
        except Exception as exc:
            if self._stop.is_set() and not streamer.error:
                raise RunStopped("run stopped") from None
            if streamer.error:
                raise ShardscopeError(streamer.error) from None
            if self.guard is not None and self.guard.problem():
                raise ShardscopeError(self.guard.problem()) from None
            if isinstance(exc, ShardscopeError):
                raise
            raise ShardscopeError(f"{self.model_path}: generation failed ({exc})") from None
        finally:
            self.progress.end()
        if not result.tokens and self._stop.is_set():  # stopped in the prompt pass: no round to report
            raise RunStopped("run stopped in the prompt pass")
        self.tokens = list(result.tokens)
        self._token_base = base + len(result.tokens) + 1
        end_read, c = process_read_bytes(proc), streamer.snapshot_counters()
        read0, c0 = marks.get("first", (end_read, c))
        n = len(result.token_s)
        per = max(n, 1)
        decode_s = sum(result.token_s)
        rates = [1.0 / d for d in result.token_s if d > 0]
        hits, misses = c.hits - c0.hits, c.misses - c0.misses
        wait_ms = (c.wait_s - c0.wait_s) * 1000 / per
        issued, correct = c.spec_issued - c0.spec_issued, c.spec_correct - c0.spec_correct
        hidden = c.spec_hidden - c0.spec_hidden
        gen = [x for x in self.samples if x.phase == "generating"]
        return ExpertRunSummary(
            model_filename=Path(self.model_path).name,
            model_size_mb=round(os.path.getsize(self.model_path) / MIB, 2),
            n_layers=len(self.moe.layers), n_shards=0, n_threads=s.threads, n_gpu_layers=0,
            n_gpu_layers_requested=s.n_gpu_layers, shard_mb=0.0, prefetch_depth=0,
            budget_mb=s.budget_mb, policy="experts", emulated_ssd_mb_s=s.ssd_mb_s,
            n_prompt=result.prompt_tokens, n_gen=len(result.tokens),
            ttft_ms=round(result.ttft_s * 1000, 2),
            avg_ts=round(n / decode_s, 3) if decode_s > 0 else 0.0,
            stddev_ts=round(statistics.pstdev(rates), 3) if len(rates) > 1 else 0.0,
            peak_rss_mb=round(_peak_rss_bytes(proc) / MIB, 1),
            resident_weights_mb=round(max(x.resident_weights_mb for x in gen), 1) if gen else math.nan,
            read_mb_per_token=round((end_read - read0) / MIB / per, 3),
            streamed_mb_per_token=round((c.loaded_bytes - c0.loaded_bytes) / MIB / per, 3),
            ssd_mb_s=round((end_read - read0) / 1e6 / decode_s, 1) if decode_s > 0 else 0.0,
            cache_hit_rate=round((hits - hidden) / (hits + misses), 4) if hits + misses else math.nan,
            on_time_rate=round(hits / (hits + misses), 4) if hits + misses else math.nan,
            cache_hits=hits - hidden, cache_misses=misses + hidden, stalls=misses,
            expert_hits=hits, expert_misses=misses,
            wait_ms_per_token=round(wait_ms, 2),
            llama_eval_ms_per_token=round(result.perf["t_eval_ms"] / max(result.perf["n_eval"], 1), 2),
            globals_mb=round(self.moe.dense_bytes / MIB, 1), pinned_mb=round(self.moe.dense_bytes / MIB, 1),
            load_mechanism=streamer.load_mechanism, evict_mechanism=streamer.evict_mechanism,
            stopped=result.stopped, text=result.text,
            n_expert=self.moe.n_expert, n_expert_used=self.moe.n_expert_used,
            expert_cache_mb=round(self.cache_bytes / MIB, 1), expert_policy=s.expert_policy,
            expert_speculation=s.expert_speculation,
            expert_hit_rate=round(hits / (hits + misses), 4) if hits + misses else math.nan,
            dense_mb_per_token=round((c.dense_loaded_bytes - c0.dense_loaded_bytes) / MIB / per, 3),
            expert_mb_per_token=round((c.loaded_bytes - c0.loaded_bytes) / MIB / per, 3),
            expert_wait_ms_per_token=round(wait_ms, 2),
            compute_ms_per_token=round(decode_s * 1000 / per - wait_ms, 2),
            spec_accuracy=round(correct / issued, 4) if issued else math.nan,
            spec_hidden_share=round(hidden / (misses + hidden), 4) if s.expert_speculation and misses + hidden
            else math.nan,
            evict_residue_mb=round(c.residue_bytes / MIB, 3),
            trace_path=self.trace_path or "",
        )

    def close(self) -> None:
        if self.sampler:
            self.sampler.stop()
        if self.streamer:
            self.streamer.close()  # loaders stop before the model's mapping goes
        if self.session:
            self.session.close()
            self.session = None
        if self._trace is not None:
            self._trace.discard()
            self._trace = None
        if self.guard is not None:
            self.guard.release()
            self.guard = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "ExpertRun":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["ExpertRun", "ExpertRunSummary", "LIVE_KEYS", "moe_layout_for", "cache_bytes_for"]
