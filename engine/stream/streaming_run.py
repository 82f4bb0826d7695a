"""One dense streaming run: layer shards stream through the residency controller.

The run's skeleton (load, file guard, phases, rounds, stop, close, the summary's
arithmetic) is engine/stream/run_skeleton.py, shared with the expert run; this module
supplies only the streamer: the shard plan, the ResidencyController that loads and
evicts shards, its counters and the knobs it takes live.
"""

from __future__ import annotations

from typing import Callable

import psutil

from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.settings import RunSettings, validate
from shardscope.engine.layout.budget_minimum import dense_minimum
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.layout.shard_plan import ShardPlan, plan_shards
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.stream.residency import PINNED, RESIDENT, ResidencyController, require_budget
from shardscope.engine.stream.run_skeleton import RunSkeleton
from shardscope.engine.stream.run_summary import RunSummary


def min_budget_mb(plan: ShardPlan, settings: RunSettings) -> float:
    """The smallest budget ``settings`` can run ``plan`` with (what apply and planning check)."""
    return dense_minimum(plan, settings.prefetch_depth).bytes / MIB


def prepare_plan(settings: RunSettings) -> tuple[str, ShardPlan]:
    """Everything that can be refused before the (slow) model load."""
    path, _, plan = _planned(settings)
    return path, plan


def _planned(settings: RunSettings):
    """(model path, the layout the plan was made from, the plan)."""
    validate(settings)
    path = resolve_model_path(settings.model_path)
    layout = load_layout(path)
    gpu_layers = 0
    if settings.n_gpu_layers > 0:
        from shardscope.engine.stream.llama_session import gpu_offload_supported

        gpu_layers = settings.n_gpu_layers if gpu_offload_supported() else 0
    plan = plan_shards(layout, settings.shard_mb, gpu_layers=gpu_layers)
    require_budget(plan, settings.budget_mb, settings.prefetch_depth)
    return path, layout, plan


class StreamingRun(RunSkeleton):
    streams = "layers"

    def __init__(self, settings: RunSettings, *, sample_interval_s: float = 0.1,
                 on_sample: Callable[[MetricsSample], None] | None = None,
                 on_token: Callable[[int, str, float], None] | None = None,
                 on_phase: Callable[[str], None] | None = None):
        model_path, layout, self.plan = _planned(settings)
        super().__init__(settings, model_path, layout, sample_interval_s=sample_interval_s,
                         on_sample=on_sample, on_token=on_token, on_phase=on_phase)
        self._layer_pos = {layer: pos for pos, layer in enumerate(self.plan.layers)}

    @property
    def controller(self) -> ResidencyController | None:
        """The layer streamer (a ResidencyController): what the window and tests read."""
        return self.streamer

    # ------------------------------------------------------------ live knobs
    def _restart_needed(self, old: RunSettings, new: RunSettings, keys: list[str]) -> bool:
        """An MoE model whose new budget no longer holds it streams experts instead: a new run (open_run)."""
        if "budget_mb" not in keys:
            return False
        from shardscope.engine.layout.moe_layout import read_moe_layout, streams_experts

        moe = read_moe_layout(self.layout)
        return streams_experts(moe, new.budget_mb) != streams_experts(moe, old.budget_mb)

    def _fits(self, new: RunSettings) -> None:
        require_budget(self.plan, new.budget_mb, new.prefetch_depth)

    def set_budget_mb(self, budget_mb: float) -> None:
        if self.streamer is not None:
            self.streamer.set_budget(budget_mb)
        if self.session is not None and self.plan.host_bytes > budget_mb * MIB:
            self.session.request_layer_hook()

    set_prefetch_depth = RunSkeleton.forward("set_prefetch_depth")
    set_policy = RunSkeleton.forward("set_policy")
    set_ssd_mb_s = RunSkeleton.forward("set_ssd_mb_s")

    # ------------------------------------------------------------ the streamer
    def _open_session(self):
        from shardscope.engine.stream.llama_session import LlamaSession  # llama.cpp loads only when needed

        s = self.settings
        fits = self.plan.host_bytes <= s.budget_mb * MIB
        # A model that streams from the start is mapped without reading it (lazy_mapping.py) and
        # streamed through our own pages; one that fits loads as llama.cpp does.
        return LlamaSession(self.model_path, n_threads=s.threads, n_gpu_layers=s.n_gpu_layers,
                            n_ctx=s.n_ctx, layer_hook=self._on_layer, hook_from_start=not fits,
                            lazy_load=not fits and not s.n_gpu_layers, load_progress=self._load_watch)

    def _open_streamer(self) -> ResidencyController:
        s = self.settings
        return ResidencyController(self.plan, self.mapping, self._fd, s.budget_mb, s.prefetch_depth, s.policy,
                                   s.ssd_mb_s, slots=self.slots)

    def _start_streamer(self) -> None:
        self.streamer.start()

    def _halt_streamer(self) -> None:
        self.streamer.close_waits()

    def session_hook_active_after_load(self) -> bool:
        """Whether layers are hooked (False while the whole model fits its budget)."""
        if self.session is None:
            self.load()
        return self.session.hook_active

    def _on_layer(self, layer_number: int) -> bool:
        controller = self.streamer
        if controller is None:
            return True
        self.progress.at_layer(layer_number)
        return controller.on_layer(self._layer_pos.get(layer_number, layer_number))

    def _prompt_bytes(self) -> int:
        """The shards not in RAM now: the prompt pass touches every layer once, so it reads each
        of them once (an expert run cannot know before its routers pick)."""
        states = self.streamer.snapshot().states
        return sum(shard.n_bytes for shard, state in zip(self.plan.shards, states) if state not in (RESIDENT, PINNED))

    def _token_done(self, index: int, proc: psutil.Process) -> None:
        if not self.session.hook_active:
            self.streamer.count_resident_pass()

    def _summary(self, result, figures: dict) -> RunSummary:
        s, c, plan = self.settings, self.streamer, self.plan
        figures.pop("decode_s")
        return RunSummary(
            **figures,
            n_layers=len(plan.layers),
            n_shards=len(plan.shards),
            n_gpu_layers=self.session.n_gpu_layers,
            n_gpu_layers_requested=s.n_gpu_layers,
            shard_mb=s.shard_mb,
            prefetch_depth=c.prefetch_depth,
            budget_mb=c.budget_bytes / MIB,
            policy=c.policy,
            emulated_ssd_mb_s=c.ssd_mb_s,
            globals_mb=round(plan.globals_bytes / MIB, 1),
            pinned_mb=round(sum(plan.shards[i].n_bytes for i in c.pinned) / MIB, 1),
            load_mechanism=c.load_mechanism,
            evict_mechanism=c.evict_mechanism,
        )


__all__ = ["StreamingRun", "RunSummary", "prepare_plan", "min_budget_mb"]
