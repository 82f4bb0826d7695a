"""The right column: live and last-round numbers, the projection caption, the shard map and
the generated text. It draws what it is given; the session decides what that is."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGroupBox, QLabel, QPlainTextEdit, QSizePolicy, QVBoxLayout, QWidget

from shardscope.app.devices.round_projection import RoundProjection
from shardscope.app.run_view.charts import ON_TIME
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.shard_plan import ShardPlan
from shardscope.engine.measure.metric_registry import FROM_MEMORY, panel_rows
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.stream.streaming_run import RunSummary, min_budget_mb
from shardscope.widgets import NumbersPanel, ShardMap

# Both panels' rows come from the metric registry; "projected" is on the chosen device (the caption names it).
# A fraction (the registry's "of 1") reads in % here, as on the charts: "0.93 of 1" beside a 93 % curve.
PERCENT_ROWS = frozenset(name for name, _label, unit in panel_rows("live") + panel_rows("summary") if unit == "of 1")
LIVE_FIELDS = [(n, label, "%" if n in PERCENT_ROWS else unit) for n, label, unit in panel_rows("live")]
ROUND_FIELDS = [(n, label, "%" if n in PERCENT_ROWS else unit) for n, label, unit in panel_rows("summary")]


def _percent(key: str, value):
    return 100.0 * value if key in PERCENT_ROWS and isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


class PercentPanel(NumbersPanel):
    """A NumbersPanel given fractions (as the engine keeps them) that shows them in %: values,
    baselines and so deltas (points), wherever they are set from."""

    def set_value(self, key, value) -> None:
        super().set_value(key, _percent(key, value))

    def set_baseline(self, values) -> None:
        super().set_baseline(None if values is None else {k: _percent(k, v) for k, v in values.items()})
ROUND_TITLE = "Last complete round (engine summary)"


class RunView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.plan: ShardPlan | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)

        live_box = QGroupBox("Live")
        QVBoxLayout(live_box).addWidget(live := PercentPanel(LIVE_FIELDS))
        self.live_numbers = live
        self.round_box = QGroupBox(ROUND_TITLE)
        rl = QVBoxLayout(self.round_box)
        rl.addWidget(rounds := PercentPanel(ROUND_FIELDS))
        self.round_numbers = rounds
        # Which figure answers "how much came from memory": its row says so, its tooltip says how.
        rounds.set_row_tip("cache_hit_rate", FROM_MEMORY)
        if "on_time_rate" in dict((n, u) for n, _l, u in ROUND_FIELDS):
            rounds.set_row_tip("on_time_rate", ON_TIME)
        # A round that spans a knob change says so here, not in the box's title: a title as wide as
        # its text widened the whole right column each time it changed.
        self.mixed_label = QLabel("")
        self.mixed_label.setWordWrap(True)
        self.mixed_label.setStyleSheet("color: #a04000")
        self.mixed_label.hide()
        rl.addWidget(self.mixed_label)
        self.projection_label = QLabel("")
        self.projection_label.setWordWrap(True)
        self.projection_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        rl.addWidget(self.projection_label)
        layout.addWidget(live_box)
        layout.addWidget(self.round_box)

        shard_box = QGroupBox("Shards")
        sl = QVBoxLayout(shard_box)
        self.shard_map = ShardMap(cell_size=14)
        self.shard_caption = QLabel("")
        self.shard_caption.setWordWrap(True)
        sl.addWidget(self.shard_map)
        sl.addWidget(self.shard_caption)
        layout.addWidget(shard_box)

        text_box = QGroupBox("Generated text")
        tl = QVBoxLayout(text_box)
        self.text_view = QPlainTextEdit()
        self.text_view.setReadOnly(True)
        self.text_view.setMaximumBlockCount(2000)
        self.text_view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        # Two lines at the least: the projection caption above took the room, and the
        # window's minimum height (about 665 px since the numbers keep their wrapped labels' lines)
        # should stay what a small laptop screen shows.
        self.text_view.setMinimumHeight(2 * self.text_view.fontMetrics().lineSpacing() + 8)
        tl.addWidget(self.text_view)
        layout.addWidget(text_box, 1)
        self.setMinimumWidth(280)

    def show_plan(self, plan: ShardPlan, settings: RunSettings, minimum_mb: float | None = None) -> None:
        """``minimum_mb``: the file's own minimum where it is not the layered one (an MoE file's)."""
        self.plan = plan
        self.shard_map.set_shards([s.label for s in plan.shards])
        self.shard_map.show()
        self.shard_caption.setText(
            f"{len(plan.shards)} shards (target {plan.shard_bytes_target / MIB:,.0f} MiB), {len(plan.layers)} layers; "
            f"globals {plan.globals_bytes / MIB:,.0f} MiB stay resident; "
            f"model weights {plan.total_bytes / MIB:,.0f} MiB; "
            f"minimum budget {minimum_mb if minimum_mb is not None else min_budget_mb(plan, settings):,.0f} MiB")

    def show_expert_streaming(self, moe) -> None:
        """An ExpertRun has no shards: dense weights stay, experts stream (the Experts column)."""
        self.plan = None
        self.shard_map.set_shards([])
        # No shards to count: the map's "evicted 0 loading 0 resident 0" would read as a
        # run with nothing resident. The caption says what streams instead.
        self.shard_map.hide()
        self.shard_caption.setText(
            f"expert streaming: {moe.dense_bytes / MIB:,.0f} MiB of dense weights stay resident; "
            f"{len(moe.layers)} layers × {moe.n_expert} experts stream through the expert cache "
            f"(see the Experts column)")

    def show_sample(self, s: MetricsSample) -> None:
        """10 Hz: label compares and array stores only; the widgets repaint on their own timers."""
        self.live_numbers.set_values({key: getattr(s, key) for key in self.live_numbers.keys()})
        if s.shard_states:
            self.shard_map.set_states(s.shard_states)
        plan, pos = self.plan, s.current_layer_pos
        if plan is not None and pos is not None and 0 <= pos < len(plan.layer_shards) and plan.layer_shards[pos]:
            self.shard_map.set_current(plan.layer_shards[pos][0])
        else:
            self.shard_map.set_current(None)

    def show_tokens(self, pieces: list[tuple[int, str]], prompt: str) -> None:
        """Tokens in the order decoded, (index in its round, text); index 0 starts a round,
        which restarts the text from the prompt."""
        starts = [i for i, (n, _piece) in enumerate(pieces) if n == 0]
        if starts:
            pieces = pieces[starts[-1]:]
            self.text_view.setPlainText(prompt)
        cursor = self.text_view.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        cursor.insertText("".join(piece for _n, piece in pieces))
        self.text_view.setTextCursor(cursor)

    def show_round(self, summary: RunSummary, mixed: str = "") -> None:
        """``mixed``: the knobs that changed while the round ran ("budget 200→605 MiB"), or ""."""
        self.round_numbers.set_values(summary.row())
        self.mixed_label.setText(f"mixed: {mixed}" if mixed else "")
        self.mixed_label.setVisible(bool(mixed))
        self.round_box.setToolTip(f"{summary.model_filename}: {summary.n_gen} tokens, "
                                  f"budget {summary.budget_mb:,.0f} MiB, {summary.policy}")

    def show_projection(self, p: RoundProjection | None, device_chosen: bool) -> None:
        if p is None:
            self.round_numbers.set_value("projected_ts", None)
            self.projection_label.setText("projection: after the first complete round" if device_chosen
                                          else "no device chosen: no projection")
            self.projection_label.setToolTip("")
            return
        self.round_numbers.set_value("projected_ts", p.tok_s)
        self.projection_label.setText(p.caption())
        self.projection_label.setToolTip(p.tooltip())
