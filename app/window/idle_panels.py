"""What the window's panels show between runs: the next Run's plan and its minimum budget, no
figures left from a stopped run or another model, an SSD emulation that follows the device.

A mixin of MainWindow (it uses the window's model, controls and run view), kept apart so the
window module stays about drawing and stays short (issue 32's stale panels).
"""

from __future__ import annotations

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.devices.devices import get_device
from shardscope.engine.layout.budget_minimum import min_budget_mb
from shardscope.engine.layout.moe_layout import streams_experts


class WindowIdlePanels:
    def _minimum_mb(self) -> float | None:
        """The open file's minimum budget where it is not the layered one: an MoE file's (the budget
        slider's floor, what ``shardscope size`` prints); None for a dense model."""
        info = self.model_info
        if info is None or info.moe is None:
            return None
        return float(min_budget_mb(info.moe, self.current_settings().expert_speculation))

    def _show_idle_plan(self) -> None:
        """Before Run (or after Stop): what the next Run streams, every shard evicted. An MoE file
        over the budget streams its experts (no shards); its minimum is the MoE one either way."""
        info, settings = self.model_info, self.current_settings()
        if info is None or self.is_running():
            return
        minimum = self._minimum_mb()
        if info.moe is not None and streams_experts(info.moe, settings.budget_mb):
            self.run_view.show_expert_streaming(info.moe)
            caption = self.run_view.shard_caption
            caption.setText(f"{caption.text()}; minimum budget {minimum:,.0f} MiB")
        else:
            self.run_view.show_plan(info.plan, settings, minimum)

    def _follow_device_ssd(self) -> None:
        """An SSD emulation that is on emulates the chosen device's disk: a new preset moves it to
        that preset's read rate (as the user would, so a running run takes it live). Off stays off:
        then the runs measure this machine's own disk."""
        device_id, current = self.device_id(), self.current_settings().ssd_mb_s
        if not device_id or not current:
            return
        try:
            rate = get_device(device_id).ssd_read_mb_s
        except ShardscopeError:
            return
        if rate != current:
            self.controls.commit("ssd_mb_s", rate)
            self.statusBar().showMessage(f"SSD emulation follows {device_id}: {rate:g} MB/s", 5000)

    def _forget_shown_run(self) -> None:
        """Another model: no panel keeps the old model's figures (token count, rates, its last round,
        its text, its projection). The rounds table keeps its rows: each names its model."""
        for pending in (self._shown_text, self._shown_sample, self._shown_round):
            pending.clear()
        self.live_numbers.clear()
        self.round_numbers.clear()
        self.run_view.round_box.setToolTip("")
        self.text_view.clear()
        self.projection = None
        self._show_projection()
