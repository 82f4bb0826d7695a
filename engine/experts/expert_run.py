"""One MoE run with expert streaming: routed experts stream through the expert cache, and where
the budget cannot hold the trunk (attention, shared experts, dense layers) it streams by layer too.

The run's skeleton (load, file guard, phases, rounds, stop, close, the summary's
arithmetic) is engine/stream/run_skeleton.py, shared with the dense StreamingRun; this
module supplies only the streamer: the ExpertStreamer (engine/experts/expert_streaming.py)
with its expert cache, composed where the trunk streams with the dense run's layer streamer
(a ResidencyController over the trunk's shards: pinned layers, a window in flight, prefetch
depth) under the trunk's part of one budget (engine/experts/budget_split.py split_budget),
its counters, the routing trace and the knobs it takes live. engine/runs/run_factory.py picks it for MoE models that do
not fit their budget, or when a routing trace is asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import psutil

from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.experts.budget_split import BudgetSplit, choose_trunk_share, split_budget
from shardscope.engine.experts.expert_streaming import HEAT_WINDOW, ExpertStreamer
from shardscope.engine.experts.expert_view import ExpertView
from shardscope.engine.experts.hash_prefetch import HashPrefetch, hash_tables
from shardscope.engine.experts.policy_advice import ADVICE_TOKENS, cache_advice
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceWriter
from shardscope.engine.knobs.knobs import LAYER_KNOBS, LIVE
from shardscope.engine.knobs.settings import RunSettings, validate
from shardscope.engine.layout.budget_minimum import prompt_batch_tokens, trunk_plan_for
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.layout.moe_layout import MoeLayout, read_moe_layout
from shardscope.engine.measure.metrics import MetricsSample, process_read_bytes
from shardscope.engine.stream.residency import ResidencyController
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
    dense_mb_per_token: float = 0.0  # trunk bytes streamed per decoded token (0 while the trunk stays resident)
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
    # percent of the budget above the minimum given to the trunk (the knob, or the engine's choice)
    trunk_share: int = 0
    trunk_mb: float = 0.0  # what the trunk's shards may keep resident (all of the trunk: it does not stream)
    trunk_streams: bool = False  # the trunk streamed by layer beside the experts
    # hash-routed layers (deepseek4): picks known ahead of their layer, the misses that hid, the share of
    # decoded tokens whose every hash pick was resident at its layer (engine/experts/hash_prefetch.py)
    hash_picks_ahead: int = 0
    hash_misses_hidden: int = 0
    hash_ready_share: float = math.nan
    # llama.cpp's own figures for its context (engine/stream/llama_memory.py): KV cache, recurrent state
    # (KDA, gated delta net) and deepseek4's compressor states, compute + output buffers
    llama_kv_mb: float = 0.0
    llama_state_mb: float = 0.0
    llama_buffers_mb: float = 0.0

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
        # one figure, one rule: bytes resident when picked (the experts' own: with a streamed trunk
        # the row's on_time_rate counts its shards too)
        expert_hit_rate=share(c.on_time_bytes - c0.on_time_bytes, c.needed_bytes - c0.needed_bytes),
        dense_mb_per_token=round((c.dense_loaded_bytes - c0.dense_loaded_bytes) / MIB / per_tok, 3),
        expert_mb_per_token=round((c.loaded_bytes - c0.loaded_bytes) / MIB / per_tok, 3),
        expert_wait_ms_per_token=round(wait_ms, 2),
        # decode time not spent waiting for weights (experts, and a streamed trunk's shards)
        compute_ms_per_token=round(figures["decode_s"] * 1000 / per_tok - figures["wait_ms_per_token"], 2),
        spec_accuracy=share(correct, issued),
        spec_hidden_share=share(hidden, misses + hidden) if speculation else math.nan,
        evict_residue_mb=round(c.residue_bytes / MIB, 3),
    )


def _memory_figures(memory) -> dict:
    if memory is None:
        return {}
    return {"llama_kv_mb": round(memory.kv_bytes / MIB, 3), "llama_state_mb": round(memory.state_bytes / MIB, 3),
            "llama_buffers_mb": round((memory.compute_bytes + memory.output_bytes) / MIB, 3)}


def split_for(moe: MoeLayout, settings: RunSettings, layout=None) -> BudgetSplit:
    """Where the budget goes (engine/layout/budget_minimum.py): globals, the trunk, the expert cache;
    or a one-line refusal naming the knob that is too small (KnobRefusal: the CLI names the flag,
    the window the slider). ``layout`` (the file's tensor table; read from ``moe.path`` when not
    given) gives the trunk's shards; a layout with no file behind it takes the trunk as resident."""
    if layout is None and Path(moe.path).is_file():
        layout = load_layout(moe.path)
    trunk = trunk_plan_for(layout, moe, settings) if layout is not None else None
    return split_budget(moe, trunk, settings)


def cache_bytes_for(moe: MoeLayout, settings: RunSettings, layout=None) -> int:
    """The expert cache the budget allows, or the refusal ``split_for`` gives."""
    return split_for(moe, settings, layout).cache_bytes


# What an expert run takes between tokens; the layer-streaming knobs do not apply to it (no shards).
LIVE_KEYS = LIVE | frozenset(LAYER_KNOBS)


class ExpertRun(RunSkeleton):
    streams = "experts"
    hash_prefetch = True  # load hash-routed layers' picks when the token is known (bench/goals/hash_prefetch.py: off)
    hashes = None  # the run's HashPrefetch (engine/experts/hash_prefetch.py), once the streamer starts
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
        # Where the budget goes: globals, the trunk (streamed by layer when it gets less than all of
        # its bytes), the expert cache (engine/layout/budget_minimum.py)
        self.trunk_plan = trunk_plan_for(layout, moe, settings)
        self.split = split_budget(moe, self.trunk_plan, settings)
        self.cache_bytes = self.split.cache_bytes
        self.trunk: ResidencyController | None = None  # the trunk's streamer, when it streams (at load)
        self._auto_share: int | None = None  # trunk_share auto: the share the last round's costs chose
        self._layer_pos = {layer: pos for pos, layer in enumerate(self.trunk_plan.layers)} if self.trunk_plan else {}
        self.trace_path = trace_path
        self._token_base = 0  # tokens of earlier rounds, so trace tokens stay distinct across rounds
        self._trace: TraceWriter | None = None
        self._marks: dict = {}
        self.prompt_batch_tokens = 0
        self.tokens: list[int] = []
        self.per_token: list[dict] = []  # decoded tokens: read bytes (kernel) vs loaded expert bytes

    # ------------------------------------------------------------ live knobs
    def _split_of(self, new: RunSettings) -> BudgetSplit:
        return split_budget(self.moe, trunk_plan_for(self.layout, self.moe, new), new, auto_share=self._auto_share)

    def _choose_share(self) -> None:
        """trunk_share auto with a streaming trunk: after each round, the share whose split costs a
        token the least, from this round's measured waits per MiB read on each side and a replay of
        the run's own routing at each split's cache (engine/layout/budget_minimum.py
        choose_trunk_share); the next round runs with it (a live change, no reload)."""
        first = self._marks.get("split_costs")
        if self.settings.trunk_share or self.trunk is None or first is None:
            return
        trunk0, experts0 = first
        trunk, experts = self.trunk.snapshot().counters, self.streamer.snapshot_counters()
        measured = []
        for wait, loaded in ((trunk.wait_s - trunk0.wait_s, trunk.loaded_bytes - trunk0.loaded_bytes),
                             (experts.wait_s - experts0.wait_s, experts.loaded_bytes - experts0.loaded_bytes)):
            measured.append(wait / (loaded / MIB) if loaded > 0 else None)
        if measured == [None, None]:
            return
        known = next(m for m in measured if m is not None)  # a side that read nothing: priced as the other
        trunk_cost, expert_cost = (m if m is not None else known for m in measured)
        trace = self._advice_trace()[0]
        if not trace.records:
            return
        from shardscope.engine.experts.replay import replay_one

        policy = self.settings.expert_policy
        self._auto_share = choose_trunk_share(
            self.moe, self.trunk_plan, self.settings,
            lambda cache: replay_one(trace, policy, int(cache)).expert_mb_per_token, trunk_cost, expert_cost)

    def _fits(self, new: RunSettings) -> None:
        self._split_of(new)  # refuses, naming the flag

    def _restart_needed(self, old: RunSettings, new: RunSettings, keys: list[str]) -> bool:
        """A trunk that starts or stops streaming needs the layer hook installed or not, a new shard
        size a new plan: a new run. Everything else moves live."""
        split = self._split_of(new)
        # speculation reads the next layer's router, which a streamed trunk holds only with speculation on
        replan = {"shard_mb", "expert_speculation"} & set(keys)
        return split.trunk_streams != self.split.trunk_streams or (self.split.trunk_streams and bool(replan))

    def _take(self, new: RunSettings) -> None:
        old = self.settings
        super()._take(new)
        if self.trunk is not None:  # the layer knobs move the trunk's streamer (the skeleton skips them here)
            if new.policy != old.policy:
                self.trunk.set_policy(new.policy)
            if new.prefetch_depth != old.prefetch_depth:
                self._resize_cache()

    def _resize_cache(self, _value=None) -> None:
        self.split = self._split_of(self.settings)
        self.cache_bytes = self.split.cache_bytes
        if self.streamer is None:
            return
        budget = int(self.settings.budget_mb * MIB)
        trunk_budget_mb = (self.trunk_plan.globals_bytes + self.split.trunk_bytes) / MIB if self.trunk else 0
        if self.trunk is not None and trunk_budget_mb < self.trunk.budget_bytes / MIB:
            self.trunk.set_budget(trunk_budget_mb)  # the side that shrinks first
        if self.trunk is not None and self.settings.prefetch_depth != self.trunk.prefetch_depth:
            self.trunk.set_prefetch_depth(self.settings.prefetch_depth)
        self.streamer.set_cache_bytes(self.cache_bytes, budget)
        if self.trunk is not None and trunk_budget_mb != self.trunk.budget_bytes / MIB:
            self.trunk.set_budget(trunk_budget_mb)

    set_budget_mb = _resize_cache
    set_expert_cache_mb = _resize_cache
    set_trunk_share = _resize_cache

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
                           {layer: self.moe.unit_bytes(layer) for layer in self.moe.layers},
                           hash_layers=tuple(sorted(hash_tables(self.layout))))

    # ------------------------------------------------------------ the streamer
    def _open_session(self):
        from shardscope.engine.stream.llama_session import LlamaSession  # llama.cpp loads only when needed

        s = self.settings
        # n_gpu_layers: the layers' dense tensors on the GPU, the routed experts kept in host
        # memory where the streamer works on them (experts_on_cpu; engine/stream/gpu_split.py).
        return LlamaSession(self.model_path, n_threads=s.threads, n_ctx=s.n_ctx, n_gpu_layers=s.n_gpu_layers,
                            experts_on_cpu=True, topk_hook=self._on_topk, hook_from_start=True,
                            layer_hook=self._on_layer if self.split.trunk_streams else None,
                            norm_hook=self._on_norm if s.expert_speculation else None, lazy_load=True,
                            load_progress=self._load_watch, prompt_batch=self._prompt_batch,
                            on_prompt_batch=self.progress.at_batch)

    def _open_streamer(self) -> ExpertStreamer:
        s = self.settings
        if self.mapping is None:
            raise ShardscopeError(f"{self.model_path}: no file mapping found; expert streaming needs Linux mmap")
        if self.trace_path:
            self._trace = TraceWriter(self.trace_path, self._trace_header())
        if self.split.trunk_streams:
            # The layer streamer over the trunk's shards, under the trunk's part of the budget, composed
            # into the expert streamer (one file, one set of own slots, one emulated disk).
            plan = self.trunk_plan
            self.trunk = ResidencyController(plan, self.mapping, self._fd,
                                             (plan.globals_bytes + self.split.trunk_bytes) / MIB,
                                             s.prefetch_depth, s.policy, s.ssd_mb_s, slots=self.slots, shared=True)
        return ExpertStreamer(self.moe, self.mapping, self._fd, budget_bytes=int(s.budget_mb * MIB),
                              cache_bytes=self.cache_bytes, policy=s.expert_policy,
                              speculation=s.expert_speculation, trace=self._trace, ssd_mb_s=s.ssd_mb_s,
                              slots=self.slots, trunk=self.trunk)

    def _prompt_batch(self) -> int:
        """Prompt tokens per llama_decode for the cache as it is now (0: the whole prompt at once)."""
        self.prompt_batch_tokens = prompt_batch_tokens(self.moe, self.cache_bytes)
        return self.prompt_batch_tokens

    def _start_streamer(self) -> None:
        self.streamer.start()
        self.hashes = HashPrefetch(self.streamer, self.layout, load=self.hash_prefetch)  # hash-routed layers

    def _halt_streamer(self) -> None:
        self.streamer.stop()

    def _on_norm(self, layer: int, row) -> None:
        if self.streamer is not None:
            self.streamer.on_norm(layer, row)

    def _on_layer(self, layer_number: int) -> bool:
        """A layer is about to compute: its trunk shards resident first (the trunk streams)."""
        trunk = self.trunk
        if trunk is None:
            return True
        self.progress.at_layer(layer_number)
        return trunk.on_layer(self._layer_pos.get(layer_number, layer_number))

    def _on_topk(self, layer: int, ids) -> bool:
        streamer = self.streamer
        if streamer is None:
            return True
        self.progress.at_layer(layer)
        hidden = self.hashes.before_topk(layer, ids) if self.hashes else 0
        go_on = streamer.on_topk(layer, ids)
        if hidden:
            self.hashes.after_topk(layer, hidden)
        return go_on

    def _token_sampled(self, index: int, token: int) -> None:
        if self.hashes and index + 1 < self.settings.n_gen:  # decoded next: its hash layers' picks are known
            self.hashes.on_token(token)

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
        if self._auto_share is not None and self.trunk is not None and self._auto_share != self.split.share:
            self._resize_cache()  # the share the last round's costs chose (trunk_share auto)
        self.per_token = []
        self._marks = {}
        self.streamer.begin_prompt()
        self.streamer.token = self._token_base
        if self.hashes:
            self.hashes.begin_round()
        self._marks["prompt_start"] = process_read_bytes(psutil.Process())

    def _token_done(self, index: int, proc: psutil.Process) -> None:
        streamer = self.streamer
        read, c = process_read_bytes(proc), streamer.snapshot_counters()
        if index == 0:
            streamer.end_prompt()
            self._marks["first"] = c
            if self.trunk is not None:  # the decode's costs per MiB on each side, for trunk_share auto
                self._marks["split_costs"] = (self.trunk.snapshot().counters, c)
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
        self._choose_share()
        self.tokens = list(result.tokens)
        for row, dt in zip(self.per_token, result.token_s):
            row["dt"] = dt
        self._token_base += len(result.tokens) + 1

    def _summary(self, result, figures: dict) -> "ExpertRunSummary":
        s, streamer, trunk = self.settings, self.streamer, self.trunk
        c = streamer.snapshot_counters()
        c0 = self._marks.get("first", c)
        per_tok = max(len(result.token_s), 1)
        expert = _expert_figures(c, c0, figures, per_tok, s.expert_speculation)
        gpu_s = self._gpu_seconds() - self._marks.get("gpu_s", self._gpu_seconds())
        figures.pop("decode_s")
        return ExpertRunSummary(
            **figures, **expert,
            n_layers=self.layout.n_layers,  # every block, as synth and size count them
            n_gpu_layers=self.session.n_gpu_layers,  # 0 where the build has no GPU offload (cli.py says so)
            n_gpu_layers_requested=s.n_gpu_layers,
            gpu_compute_ms_per_token=round(gpu_s * 1000 / per_tok, 2),
            shard_mb=s.shard_mb if trunk else 0.0, prefetch_depth=trunk.prefetch_depth if trunk else 0,
            budget_mb=s.budget_mb, policy=trunk.policy if trunk else "", emulated_ssd_mb_s=s.ssd_mb_s,
            n_shards=len(self.trunk_plan.shards) if trunk else 0,
            globals_mb=round((self.trunk_plan.globals_bytes if trunk else self.moe.dense_bytes) / MIB, 1),
            pinned_mb=round((sum(self.trunk_plan.shards[i].n_bytes for i in trunk.pinned) if trunk else
                             self.moe.dense_bytes) / MIB, 1),
            trunk_share=self.split.share, trunk_mb=round(self.split.trunk_bytes / MIB, 1),
            trunk_streams=trunk is not None and self.split.trunk_streams,
            load_mechanism=streamer.io.load_mechanism, evict_mechanism=streamer.io.evict_mechanism,
            n_expert=self.moe.n_expert, n_expert_used=self.moe.n_expert_used,
            expert_cache_mb=round(self.cache_bytes / MIB, 1), expert_policy=s.expert_policy,
            expert_advice=cache_advice(s.expert_policy, self.cache_bytes, streamer.unit_bytes, self.moe.n_expert_used,
                                       *self._advice_trace()),
            expert_speculation=s.expert_speculation,
            trace_path=self.trace_path or "",
            prompt_batch_tokens=min(self.prompt_batch_tokens or result.prompt_tokens, result.prompt_tokens),
            prompt_mb_read=round(self._marks.get("prompt_read", 0) / MIB, 3),
            **(self.hashes.figures() if self.hashes else {}),
            **_memory_figures(getattr(self.session, "memory", None)),
        )

    def _close_extras(self) -> None:
        if self._trace is not None:
            self._trace.discard()
            self._trace = None


__all__ = ["ExpertRun", "ExpertRunSummary", "LIVE_KEYS", "moe_layout_for", "cache_bytes_for", "split_for"]
