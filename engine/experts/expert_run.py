"""One MoE run with expert streaming: dense weights stay resident, routed experts stream.

The run's skeleton (load, file guard, phases, rounds, stop, close, the summary's
arithmetic) is engine/stream/run_skeleton.py, shared with the dense StreamingRun; this
module supplies only the streamer: the ExpertStreamer (engine/experts/expert_streaming.py)
with its expert cache under the rest of the budget, its counters, the routing trace and
the knobs it takes live. engine/runs/run_factory.py picks it for MoE models that do not
fit their budget, or when a routing trace is asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import psutil

from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.knobs.knob_refusal import KnobRefusal
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.experts.policy_advice import ADVICE_TOKENS, cache_advice
from shardscope.engine.experts.expert_streaming import HEAT_WINDOW, ExpertStreamer
from shardscope.engine.experts.expert_view import ExpertView
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceWriter
from shardscope.engine.knobs.knobs import LAYER_KNOBS, LIVE
from shardscope.engine.knobs.settings import RunSettings, validate
from shardscope.engine.layout.budget_minimum import (expert_cache_bytes, min_budget_mb, min_expert_cache_bytes,
                                                     prompt_batch_tokens, resident_dense_bytes, whole_mb)
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.layout.moe_layout import MoeLayout, read_moe_layout
from shardscope.engine.measure.metrics import MetricsSample, process_read_bytes
from shardscope.engine.stream.run_skeleton import RunSkeleton, share
from shardscope.engine.stream.run_summary import RunSummary


@dataclass
class ExpertRunSummary(RunSummary):
    """RunSummary's row plus the expert figures (rates are fractions 0..1)."""

    n_expert: int = 0
    n_expert_used: int = 0
    expert_cache_mb: float = 0.0
    expert_policy: str = ""
    expert_speculation: bool = False
    expert_hit_rate: float = math.nan  # by bytes: picked experts resident when picked (a guess loaded in time counts)
    expert_hits: int = 0
    expert_misses: int = 0  # picked experts the decode waited for
    dense_mb_per_token: float = 0.0  # dense bytes streamed per decoded token (they stay resident: 0)
    expert_mb_per_token: float = 0.0  # experts loaded per decoded token (the streamer's count)
    expert_wait_ms_per_token: float = 0.0
    compute_ms_per_token: float = 0.0  # decode time not spent waiting for experts
    gpu_compute_ms_per_token: float = 0.0  # of it, the GPU layers' stretches (0 without GPU layers)
    spec_accuracy: float = math.nan  # guessed experts that their layer then picked
    spec_hidden_share: float = math.nan  # of the would-be misses, the share a guess had loaded in time
    evict_residue_mb: float = 0.0  # what mincore still saw after evictions (then paged out)
    prompt_batch_tokens: int = 0  # prompt tokens per llama_decode (all of them when the cache holds a layer's bank)
    prompt_mb_read: float = 0.0  # the kernel's read_bytes from the prompt's start to its first token
    trace_path: str = ""
    expert_advice: str = ""  # a better policy on the run's own routing, and by how much (policy_advice.py)

    @staticmethod
    def columns() -> list[str]:
        return [f for f in ExpertRunSummary.__dataclass_fields__ if f != "text"]


def moe_layout_for(settings: RunSettings) -> MoeLayout | None:
    """The model's expert layout (None: dense); malformed MoE files are refused here."""
    return read_moe_layout(load_layout(resolve_model_path(settings.model_path)))


def _expert_figures(c, c0, figures: dict, per_tok: int, speculation: bool) -> dict:
    """The expert columns from the streamer's counters at the first and the last token."""
    hits, misses = c.hits - c0.hits, c.misses - c0.misses
    issued, correct = c.spec_issued - c0.spec_issued, c.spec_correct - c0.spec_correct
    hidden = c.spec_hidden - c0.spec_hidden
    wait_ms = (c.wait_s - c0.wait_s) * 1000 / per_tok
    return dict(
        expert_hits=hits, expert_misses=misses,
        expert_hit_rate=figures["on_time_rate"],  # one figure, one rule: bytes resident when picked
        dense_mb_per_token=round((c.dense_loaded_bytes - c0.dense_loaded_bytes) / MIB / per_tok, 3),
        expert_mb_per_token=round((c.loaded_bytes - c0.loaded_bytes) / MIB / per_tok, 3),
        expert_wait_ms_per_token=round(wait_ms, 2),
        compute_ms_per_token=round(figures["decode_s"] * 1000 / per_tok - wait_ms, 2),
        spec_accuracy=share(correct, issued),
        spec_hidden_share=share(hidden, misses + hidden) if speculation else math.nan,
        evict_residue_mb=round(c.residue_bytes / MIB, 3),
    )


def cache_bytes_for(moe: MoeLayout, settings: RunSettings) -> int:
    """The expert cache the budget allows (engine/layout/budget_minimum.py), or a one-line refusal
    naming the knob that is too small (KnobRefusal: the CLI names the flag, the window the slider)."""
    budget = int(settings.budget_mb * MIB)
    dense = resident_dense_bytes(moe)  # whole pages: what mincore will count
    name = Path(moe.path).name
    spec = settings.expert_speculation
    floor = min_expert_cache_bytes(moe, spec)
    step = f"{'3' if spec else '2'} layers' picks of {plural(moe.n_expert_used, 'expert')}"
    if budget - dense < floor:  # too small whatever the cache is set to: the budget is the knob
        raise KnobRefusal(
            f"budget {settings.budget_mb:g} MiB leaves {max(budget - dense, 0) / MIB:.1f} MiB for experts of {name}; "
            f"the minimum is {min_budget_mb(moe, spec)} MiB (dense {dense / MIB:.1f} MiB + {step}"
            f"{' (speculation on)' if spec else ''}, {floor / MIB:.1f} MiB)", "budget_mb", min_budget_mb(moe, spec))
    cache = expert_cache_bytes(moe, settings.budget_mb, settings.expert_cache_mb)
    if dense + cache > budget:
        raise KnobRefusal(
            f"with {name}'s {dense / MIB:.0f} MiB of dense weights it exceeds the budget of "
            f"{settings.budget_mb:g} MiB", "expert_cache_mb", max(0, (budget - dense) // MIB), "at most",
            given=settings.expert_cache_mb)
    if cache < floor:
        raise KnobRefusal(
            f"below the minimum expert cache of {name}, {whole_mb(floor)} MiB ({step}"
            f"{' (speculation on)' if spec else ''})", "expert_cache_mb", whole_mb(floor),
            given=settings.expert_cache_mb)
    return cache


# What an expert run takes between tokens; the layer-streaming knobs do not apply to it (no shards).
LIVE_KEYS = LIVE | frozenset(LAYER_KNOBS)


class ExpertRun(RunSkeleton):
    streams = "experts"
    apply_between_tokens = True  # the streamer's books change on the decode thread only

    def __init__(self, settings: RunSettings, *, trace_path: str | None = None, sample_interval_s: float = 0.1,
                 on_sample: Callable[[MetricsSample], None] | None = None,
                 on_token: Callable[[int, str, float], None] | None = None,
                 on_phase: Callable[[str], None] | None = None):
        settings = validate(settings)
        model_path = resolve_model_path(settings.model_path)
        layout = load_layout(model_path)
        moe = read_moe_layout(layout)  # refuses malformed MoE files before llama.cpp can abort on them
        if moe is None:
            raise ShardscopeError(f"{model_path}: not a mixture-of-experts model (no expert tensors)")
        super().__init__(settings, model_path, layout, sample_interval_s=sample_interval_s,
                         on_sample=on_sample, on_token=on_token, on_phase=on_phase)
        self.moe = moe
        self.cache_bytes = cache_bytes_for(moe, settings)
        self.trace_path = trace_path
        self._token_base = 0  # tokens of earlier rounds, so trace tokens stay distinct across rounds
        self._trace: TraceWriter | None = None
        self._marks: dict = {}
        self.prompt_batch_tokens = 0
        self.tokens: list[int] = []
        self.per_token: list[dict] = []  # decoded tokens: read bytes (kernel) vs loaded expert bytes

    # ------------------------------------------------------------ live knobs
    def _fits(self, new: RunSettings) -> None:
        cache_bytes_for(self.moe, new)  # refuses, naming the flag

    def _resize_cache(self, _value=None) -> None:
        self.cache_bytes = cache_bytes_for(self.moe, self.settings)
        if self.streamer is not None:
            self.streamer.set_cache_bytes(self.cache_bytes, int(self.settings.budget_mb * MIB))

    set_budget_mb = _resize_cache
    set_expert_cache_mb = _resize_cache

    set_expert_policy = RunSkeleton.forward("set_policy")
    set_expert_speculation = RunSkeleton.forward("set_speculation")

    def set_ssd_mb_s(self, ssd_mb_s: float) -> None:
        if self.streamer is not None:
            self.streamer.limiter.mb_s = ssd_mb_s

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
        """This run's routing so far (also without --trace), as engine/experts/replay.py takes it."""
        records = self.streamer.routing_records() if self.streamer is not None else ()
        return RoutingTrace(self._trace_header(), records)

    def _advice_trace(self) -> tuple[RoutingTrace, str, bool]:
        """(trace, its name, whether earlier tokens were left out) for cache_advice: the last
        ADVICE_TOKENS decoded tokens' routing, which it replays each round."""
        records, more = self.streamer.routing_tail(ADVICE_TOKENS) if self.streamer is not None else ((), False)
        return RoutingTrace(self._trace_header(), records), "this run's routing", more

    def _trace_header(self) -> TraceHeader:
        return TraceHeader(Path(self.model_path).name, self.moe.n_expert, self.moe.n_expert_used,
                           {layer: self.moe.unit_bytes(layer) for layer in self.moe.layers})

    # ------------------------------------------------------------ the streamer
    def _open_session(self):
        from shardscope.engine.stream.llama_session import LlamaSession  # llama.cpp loads only when needed

        s = self.settings
        # n_gpu_layers: the layers' dense tensors on the GPU, the routed experts kept in host
        # memory where the streamer works on them (experts_on_cpu; engine/stream/gpu_split.py).
        return LlamaSession(self.model_path, n_threads=s.threads, n_ctx=s.n_ctx, n_gpu_layers=s.n_gpu_layers,
                            experts_on_cpu=True, topk_hook=self._on_topk, hook_from_start=True,
                            norm_hook=self._on_norm if s.expert_speculation else None, lazy_load=True,
                            load_progress=self._load_watch, prompt_batch=self._prompt_batch,
                            on_prompt_batch=self.progress.at_batch)

    def _open_streamer(self) -> ExpertStreamer:
        s = self.settings
        if self.mapping is None:
            raise ShardscopeError(f"{self.model_path}: no file mapping found; expert streaming needs Linux mmap")
        if self.trace_path:
            self._trace = TraceWriter(self.trace_path, self._trace_header())
        return ExpertStreamer(self.moe, self.mapping, self._fd, budget_bytes=int(s.budget_mb * MIB),
                              cache_bytes=self.cache_bytes, policy=s.expert_policy,
                              speculation=s.expert_speculation, trace=self._trace, ssd_mb_s=s.ssd_mb_s,
                              slots=self.slots)

    def _prompt_batch(self) -> int:
        """Prompt tokens per llama_decode for the cache as it is now (0: the whole prompt at once)."""
        self.prompt_batch_tokens = prompt_batch_tokens(self.moe, self.cache_bytes)
        return self.prompt_batch_tokens

    def _start_streamer(self) -> None:
        self.streamer.start()

    def _halt_streamer(self) -> None:
        self.streamer.stop()

    def _on_norm(self, layer: int, row) -> None:
        if self.streamer is not None:
            self.streamer.on_norm(layer, row)

    def _on_topk(self, layer: int, ids) -> bool:
        streamer = self.streamer
        if streamer is None:
            return True
        self.progress.at_layer(layer)
        return streamer.on_topk(layer, ids)

    def run(self, continuous: bool = False,
            on_summary: Callable[["ExpertRunSummary"], None] | None = None) -> "ExpertRunSummary":
        """As RunSkeleton.run; the routing trace is kept only when every round ended well."""
        try:
            summary = super().run(continuous, on_summary)
        except BaseException:
            if self._trace is not None:
                self._trace.discard()
                self._trace = None
            raise
        if self._trace is not None:
            self._trace.close()
            self._trace = None
        return summary

    def _begin_round(self) -> None:
        self._take_pending()
        self.per_token = []
        self._marks = {}
        self.streamer.begin_prompt()
        self.streamer.token = self._token_base
        self._marks["prompt_start"] = process_read_bytes(psutil.Process())

    def _token_done(self, index: int, proc: psutil.Process) -> None:
        streamer = self.streamer
        read, c = process_read_bytes(proc), streamer.snapshot_counters()
        if index == 0:
            streamer.end_prompt()
            self._marks["first"] = c
            self._marks["gpu_s"] = self._gpu_seconds()
            self._marks["prompt_read"] = read - self._marks.get("prompt_start", read)
        else:
            read0, c0, _ = self._marks["last"]
            self.per_token.append({"read_bytes": read - read0, "expert_bytes": c.loaded_bytes - c0.loaded_bytes,
                                   "misses": c.misses - c0.misses, "hits": c.hits - c0.hits,
                                   "wait_s": c.wait_s - c0.wait_s, "dt": 0.0})
        self._marks["last"] = (read, c, index)
        streamer.token = self._token_base + index + 1

    def _gpu_seconds(self) -> float:
        """The session's GPU compute seconds so far (0 without GPU layers: all on the CPU)."""
        clock = self.session.clock
        return clock.seconds["gpu"] if clock is not None else 0.0

    def _end_round(self, result) -> None:
        self.tokens = list(result.tokens)
        for row, dt in zip(self.per_token, result.token_s):
            row["dt"] = dt
        self._token_base += len(result.tokens) + 1

    def _summary(self, result, figures: dict) -> "ExpertRunSummary":
        s, streamer = self.settings, self.streamer
        c = streamer.snapshot_counters()
        c0 = self._marks.get("first", c)
        per_tok = max(len(result.token_s), 1)
        expert = _expert_figures(c, c0, figures, per_tok, s.expert_speculation)
        gpu_s = self._gpu_seconds() - self._marks.get("gpu_s", self._gpu_seconds())
        figures.pop("decode_s")
        return ExpertRunSummary(
            **figures, **expert,
            n_layers=self.layout.n_layers, n_shards=0,  # every block, as synth and size count them
            n_gpu_layers=self.session.n_gpu_layers,  # 0 where the build has no GPU offload (cli.py says so)
            n_gpu_layers_requested=s.n_gpu_layers,
            gpu_compute_ms_per_token=round(gpu_s * 1000 / per_tok, 2), shard_mb=0.0, prefetch_depth=0,
            budget_mb=s.budget_mb, policy="", emulated_ssd_mb_s=s.ssd_mb_s,
            globals_mb=round(self.moe.dense_bytes / MIB, 1), pinned_mb=round(self.moe.dense_bytes / MIB, 1),
            load_mechanism=streamer.io.load_mechanism, evict_mechanism=streamer.io.evict_mechanism,
            n_expert=self.moe.n_expert, n_expert_used=self.moe.n_expert_used,
            expert_cache_mb=round(self.cache_bytes / MIB, 1), expert_policy=s.expert_policy,
            expert_advice=cache_advice(s.expert_policy, self.cache_bytes, streamer.unit_bytes, self.moe.n_expert_used,
                                       *self._advice_trace()),
            expert_speculation=s.expert_speculation,
            trace_path=self.trace_path or "",
            prompt_batch_tokens=min(self.prompt_batch_tokens or result.prompt_tokens, result.prompt_tokens),
            prompt_mb_read=round(self._marks.get("prompt_read", 0) / MIB, 3),
        )

    def _close_extras(self) -> None:
        if self._trace is not None:
            self._trace.discard()
            self._trace = None


__all__ = ["ExpertRun", "ExpertRunSummary", "LIVE_KEYS", "moe_layout_for", "cache_bytes_for"]
