"""The window after issue 19's look at it: legends clear of titles, expert knobs disabled (with
the reason) for a dense model, a cacheability axis that starts at 0 before any data, and no
shard counts of 0 while experts stream."""

from __future__ import annotations

import types

from PySide6.QtWidgets import QApplication


def test_chart_legends_never_cover_the_titles(qtbot):
    from shardscope.app.experts.expert_charts import add_expert_curves, show_expert_row
    from shardscope.app.run_view.charts import PLOTS, build_run_chart

    chart = build_run_chart()
    add_expert_curves(chart)  # an MoE run: four entries under "Cache hits, on time"
    show_expert_row(chart, True)
    qtbot.addWidget(chart)
    chart.resize(470, 900)  # the chart column's width in a 1600 px window
    chart.show()
    qtbot.waitExposed(chart)
    for _ in range(5):
        QApplication.processEvents()
    for key in (*PLOTS, "per_token"):
        item = chart.plot_item(key)
        title = item.titleLabel.item.sceneBoundingRect()  # the title's text, not its whole row
        legend = item.legend.sceneBoundingRect()
        assert title.width() > 50 and legend.width() > 20, key
        assert not title.intersects(legend), (key, title, legend)


def test_expert_knobs_are_disabled_for_a_dense_model_and_say_why(window):
    c = window.controls
    assert window.model_info.moe is None  # the bundled gemma is dense
    assert not c.sliders["expert_cache_mb"].slider.isEnabled()
    assert not c.combos["expert_policy"].isEnabled()
    assert not c.checks["expert_speculation"].isEnabled()
    for widget in (c.sliders["expert_cache_mb"], c.combos["expert_policy"], c.checks["expert_speculation"]):
        assert "dense model" in widget.toolTip() and "no routed experts" in widget.toolTip()
    assert c.sliders["shard_mb"].slider.isEnabled()  # the dense run's own knobs stay


def test_expert_knobs_come_back_for_an_moe_model(window):
    from shardscope.engine.knobs.knobs import KNOBS

    window.model_info = types.SimpleNamespace(path="/models/moe.gguf", moe=True)  # an MoE file is open
    window.show_experts(types.SimpleNamespace(layers=[0, 1], n_expert=8, n_expert_used=2,
                                              dense_bytes=2**20, expert_bytes=8 * 2**20, total_bytes=9 * 2**20))
    c = window.controls
    assert c.combos["expert_policy"].isEnabled() and c.checks["expert_speculation"].isEnabled()
    assert c.combos["expert_policy"].toolTip() == KNOBS["expert_policy"].tip


def test_cacheability_axis_starts_at_zero_before_any_data(qtbot):
    from shardscope.widgets.cacheability_plot import CacheabilityPlot

    plot = CacheabilityPlot()
    qtbot.addWidget(plot)
    plot.resize(400, 300)
    plot.show()
    plot.set_size_limit(143.0)
    plot.set_current(175.0)  # what the budget leaves for experts, before anything ran
    QApplication.processEvents()
    low, high = plot.item.vb.viewRange()[0]
    assert low <= 0 and high >= 140, (low, high)
    plot.set_curves({"lru": [(10, 0.2), (50, 0.6)]})
    QApplication.processEvents()
    low, high = plot.item.vb.viewRange()[0]
    assert low <= 10 and 50 <= high < 80, (low, high)  # with data, the data sets the axis


def test_shard_panel_shows_no_zero_counts_while_experts_stream(qtbot):
    from shardscope.app.run_view.run_view import RunView

    view = RunView()
    qtbot.addWidget(view)
    view.show()
    view.show_expert_streaming(types.SimpleNamespace(layers=list(range(12)), n_expert=64, dense_bytes=6 * 2**20))
    assert view.shard_map.isHidden()  # no "evicted 0 loading 0 resident 0"
    assert "expert streaming" in view.shard_caption.text()


def test_dense_hit_legend_names_no_expert_curves(qtbot):
    from shardscope.app.experts.expert_charts import add_expert_curves, show_expert_row
    from shardscope.app.run_view.charts import build_run_chart

    chart = build_run_chart()
    qtbot.addWidget(chart)
    add_expert_curves(chart)  # starts dense

    def names():
        # the full names (a small plot's legend shows the short ones: LiveChart.fit_legend)
        return [getattr(label, "full_name", label.text) for _sample, label in chart.plot_item("hit").legend.items]

    from shardscope.app.experts.expert_charts import EXPERT_HIT_LABELS

    dense = names()
    assert len(dense) == 2 and not set(dense) & set(EXPERT_HIT_LABELS.values())
    show_expert_row(chart, True)
    assert names() == dense + list(EXPERT_HIT_LABELS.values())
    show_expert_row(chart, False)
    assert names() == dense
