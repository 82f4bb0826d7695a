"""The memory chart draws an expert run's trunk and expert cache apart (issue 50 item 4), as drawn:
the plot items hold the sample's values after a redraw, and a dense run's legend does not name them."""

from __future__ import annotations

import math
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from shardscope.app.experts.expert_charts import add_expert_curves, expert_values, show_expert_row  # noqa: E402
from shardscope.app.run_view.charts import build_run_chart, sample_values  # noqa: E402
from shardscope.engine.measure.metrics import MetricsSample  # noqa: E402


def _sample(t: float, trunk: float, cache: float) -> MetricsSample:
    return MetricsSample(t_s=t, rss_mb=300.0, resident_weights_mb=120.0, other_rss_mb=180.0, ssd_mb_s=10.0,
                         read_mb_total=5.0, cache_hit_rate=0.5, on_time_rate=0.5, tok_s=3.0, n_tokens=int(t),
                         budget_mb=128.0, accounted_weights_mb=120.0, cache_hits=1, cache_misses=1, on_time=1,
                         stalls=0, trunk_resident_mb=trunk, expert_cache_mb=cache)


def _drawn(chart, plot: str, name: str):
    for item in chart.plot_item(plot).listDataItems():
        if item.name() == name:
            return item.getData()
    raise AssertionError(f"no curve {name!r} on {plot}")


def test_trunk_and_expert_cache_are_drawn_apart_on_the_memory_plot(qtbot):
    chart = build_run_chart()
    qtbot.addWidget(chart)
    add_expert_curves(chart)
    show_expert_row(chart, True)
    for t, trunk, cache in ((1.0, 40.0, 60.0), (2.0, 44.0, 58.0), (3.0, 42.0, 61.0)):
        s = _sample(t, trunk, cache)
        chart.append(t, {**sample_values(s), **expert_values(s)})
    chart._redraw()  # what the refresh timer calls
    _, trunk_y = _drawn(chart, "memory", "trunk held")
    _, cache_y = _drawn(chart, "memory", "expert cache")
    assert list(trunk_y[-3:]) == [40.0, 44.0, 42.0]
    assert list(cache_y[-3:]) == [60.0, 58.0, 61.0]
    names = {getattr(t, "full_name", None) or t.text for _s, t in chart.plot_item("memory").legend.items}
    assert {"trunk held", "expert cache"} <= names or {"trunk", "experts"} <= names, names


def test_a_dense_runs_samples_leave_the_split_as_gaps(qtbot):
    s = _sample(1.0, math.nan, math.nan)
    values = expert_values(s)
    assert math.isnan(values["trunk_held"]) and math.isnan(values["expert_cache"])
    chart = build_run_chart()
    qtbot.addWidget(chart)
    add_expert_curves(chart)
    show_expert_row(chart, False)
    names = {getattr(t, "full_name", None) or t.text for _s, t in chart.plot_item("memory").legend.items}
    assert "trunk held" not in names and "expert cache" not in names
