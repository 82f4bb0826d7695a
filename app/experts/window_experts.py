"""The window's MoE side: the expert column shown for MoE models, fed from the run, and the
cacheability curve's click back into the expert cache knob.

A mixin of MainWindow (it uses the window's session, controls and device panel), kept
apart so the window module stays about drawing and stays short.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from shardscope.app.experts.expert_charts import show_expert_row
from shardscope.app.experts.expert_panel import ExpertPanel
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.experts.expert_run import cache_bytes_for
from shardscope.engine.knobs.knobs import ENABLED, KNOBS, LAYER_KNOBS
from shardscope.engine.layout.moe_layout import MoeLayout, streams_experts

# The knobs only an expert-streaming run reads (engine/knobs: streams="experts").
EXPERT_KNOBS = tuple(k for k in ENABLED if KNOBS[k].streams == "experts")


class WindowExperts:
    def _build_expert_panel(self) -> ExpertPanel:
        panel = ExpertPanel()
        panel.view_source = lambda: self.worker.latest_view() if self.worker is not None else None
        panel.records_source = lambda: self.worker.routing_records() if self.worker is not None else None
        panel.run_source = lambda: self.worker  # held during a replay where no core is free for it
        panel.cache_size_chosen.connect(self.choose_expert_cache)
        panel.failed.connect(lambda m: self.statusBar().showMessage(m.splitlines()[0], 8000))
        panel.hide()
        self.expert_panel = panel
        return panel

    def show_experts(self, moe: MoeLayout | None) -> None:
        """Show the expert column for an MoE model (hide it, and disable the expert knobs, for a dense one)."""
        show_expert_row(self.chart, moe is not None)
        self._grey_unused_knobs(moe)
        if moe is None:
            self.expert_panel.hide()
            return
        self.expert_panel.show_layout(moe)
        if self.expert_panel.isHidden():
            # Room for the expert column comes from the right column, not the charts.
            sizes = self.splitter.sizes()
            right = max(self.run_view.minimumWidth(), sizes[3] - 380)
            self.splitter.setSizes([sizes[0], max(360, sum(sizes) - sizes[0] - 380 - right), 380, right])
        self.expert_panel.show()
        self._show_expert_cache()

    def _grey_unused_knobs(self, moe: MoeLayout | None) -> None:
        """Grey the knobs the run kind does not read, each with a tooltip saying why: the expert
        knobs for a dense model, the layer-streaming knobs (shards, prefetch, policy) for an MoE
        model whose experts stream under this budget (an ExpertRun has no shards)."""
        name = Path(self.model_info.path).name if getattr(self, "model_info", None) else "this model"
        for key in EXPERT_KNOBS:
            self.controls.set_disabled_reason(
                key, None if moe is not None else "dense model",
                f"Disabled: {name} is a dense model (no routed experts), so the expert cache, expert policy "
                f"and speculation change nothing. Open an MoE GGUF to use them.")
        experts = streams_experts(moe, self.current_settings().budget_mb)
        for key in LAYER_KNOBS:
            self.controls.set_disabled_reason(
                key, "experts stream" if experts else None,
                f"Disabled: {name} is larger than the budget, so its routed experts stream through the expert "
                f"cache (no shards): shard size, prefetch depth and policy change nothing. The Expert cache, "
                f"Expert policy and speculation knobs decide what stays in memory.")

    def _show_expert_cache(self) -> None:
        """Mark the cache size in use, on the curve and on the slider: the knob, or (0) what the
        engine takes from the budget after the dense weights (its own rule, cache_bytes_for)."""
        moe, s = self.expert_panel.moe, self.current_settings()
        self._grey_unused_knobs(moe if getattr(self, "model_info", None) and self.model_info.moe else None)
        cache = float(s.expert_cache_mb) if s.expert_cache_mb else None  # the size chosen, even on a trace alone
        auto = None  # what "auto" (0) gives: all the budget leaves after the dense weights
        if moe is not None and streams_experts(moe, s.budget_mb):
            try:
                auto = cache_bytes_for(moe, s.with_changes(expert_cache_mb=0)) / MIB
            except ShardscopeError:  # below the minimum: the budget slider does not offer it
                auto = None
        if not s.expert_cache_mb:
            cache = auto
        slider = self.controls.sliders["expert_cache_mb"]
        limits = self.controls.limits("expert_cache_mb")
        if limits is not None and limits[2]:  # the slider's lowest position is "auto"
            slider.setMinimumText(f"auto {auto:,.0f} MiB" if auto is not None else "auto")
        else:
            slider.setMinimumText(None)
        self.expert_panel.set_current_cache(cache)
        self.expert_panel.set_projection_inputs(self.last_round, self.device_id(), s.expert_policy)

    def choose_expert_cache(self, cache_mb: float) -> None:
        """A click on the cacheability curve: that size becomes the expert cache, as if the
        slider had been moved (marked, and applied live to a running run)."""
        self.controls.commit("expert_cache_mb", int(round(cache_mb)))
        self._show_expert_cache()

    def _open_trace_dialog(self) -> None:
        start = str(Path(self.model_info.path).parent) if self.model_info else str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Open routing trace", start,
                                              "Routing traces (*.jsonl *.json *.csv);;All files (*)")
        if path:
            self.open_trace(path)

    def open_trace(self, path: str) -> None:
        """Replay a trace file into the cacheability plot: ``shardscope bench --trace``'s, or another
        engine's CSV as it is (engine/experts/foreign_traces.py, docs/trace-formats.md)."""
        self.expert_panel.show()
        self.expert_panel.compute_from_file(path)
