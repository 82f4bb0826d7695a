"""No text prints over other text in the window's charts: plot titles, legends, level-line
labels (budget, emulated SSD, projected) and change-marker labels, at the two window sizes
people use (1600 x 1000 and 1280 x 800), for a dense run and an MoE run's extra row.

Seen before this test: change markers under the legends and over each other ("p t budget
244→234 MiB"), the "emulated SSD" and "budget" labels under the legends. Rects are read
from the scene (Qt's own geometry of the drawn items), not from the chart's books.
"""

from __future__ import annotations

import itertools

import pyqtgraph as pg
import pytest
from PySide6.QtWidgets import QGraphicsTextItem

from shardscope.app.experts.expert_charts import show_expert_row
from shardscope.app.run_view.charts import set_projection

SIZES = [(1600, 1000), (1280, 800)]


def _text_rects(chart) -> list[tuple[str, object]]:
    """(what, scene rect) of every visible text block in the chart's scene."""
    blocks = []
    for item in chart.scene().items():
        if not item.isVisible() or not _visible_up(item):
            continue
        if isinstance(item, pg.LegendItem):
            if item.items:
                blocks.append(("legend", item.sceneBoundingRect()))
        elif isinstance(item, QGraphicsTextItem) and item.toPlainText().strip():
            if _inside_legend(item):
                continue  # a legend is one block
            blocks.append((item.toPlainText()[:30], item.sceneBoundingRect()))
    return blocks


def _visible_up(item) -> bool:
    while item is not None:
        if not item.isVisible():
            return False
        item = item.parentItem()
    return True


def _inside_legend(item) -> bool:
    parent = item.parentItem()
    while parent is not None:
        if isinstance(parent, pg.LegendItem):
            return True
        parent = parent.parentItem()
    return False


def _fill(window, moe: bool, budget: float) -> None:
    chart = window.chart
    show_expert_row(chart, moe)
    keys = chart.curve_keys()
    for i in range(900):  # 90 s at 10 Hz; the view follows the last 60
        t = i * 0.1
        chart.append(t, {k: (40.0 + (i % 37)) for k in keys})
    chart.set_level("budget", budget)  # inside the data, or near the top under the legend
    chart.set_level("emulated", 60.0)
    set_projection(chart, 55.0, "projected on iPhone 16 Pro:")
    for n, t in enumerate((40.0, 62.0, 75.0, 80.0, 80.5, 81.0, 88.0, 89.9)):
        chart.mark_event(t, f"p t budget {244 - n}\u2192{234 - n} MiB")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
@pytest.mark.parametrize("budget", [70.0, 95.0], ids=["budget-mid", "budget-top"])
def test_no_text_over_text_in_the_charts(qtbot, window, size, moe, budget) -> None:
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=60_000)  # hang bound
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    _fill(window, moe, budget)
    qtbot.wait(300)  # the layout settles
    drawn = window.chart.refresh_count
    window.chart.append(90.0, {k: 50.0 for k in window.chart.curve_keys()})  # the next sample
    qtbot.waitUntil(lambda: window.chart.refresh_count > drawn, timeout=10_000)  # hang bound
    window.chart.viewport().repaint()  # pyqtgraph maps a view's items into the scene when it paints
    blocks = _text_rects(window.chart)
    names = [n for n, _ in blocks]
    # The budget's label is on its line, or (under the legend) in the memory plot's title.
    assert any(f"budget {budget:.1f}" in n for n in names) or \
        f"budget {budget:.1f}" in window.chart.plot_item("memory").titleLabel.text, names
    assert any(n.startswith("p t budget") for n in names), names
    # Everything inside the chart's own pane: a title sized to its text once widened the chart
    # past it, and legends went off the window's edge.
    pane = window.chart.mapToScene(window.chart.viewport().rect()).boundingRect()
    for name, rect in blocks:
        if name == "legend" or name.startswith(("p t budget", "budget", "emulated", "projected")):
            assert rect.right() <= pane.right() + 1, f"{name!r} runs past the chart's edge at {size}"
    for (a, ra), (b, rb) in itertools.combinations(blocks, 2):
        assert not ra.intersects(rb), f"{a!r} prints over {b!r} at {size[0]}x{size[1]}"


def _tok_chart(qtbot, value: float):
    from shardscope.app.run_view.charts import build_run_chart

    chart = build_run_chart()
    qtbot.addWidget(chart)
    chart.resize(900, 700)
    chart.show()
    qtbot.waitExposed(chart)
    set_projection(chart, 20.0, "projected on iPhone 16 Pro: 20 tok/s")
    drawn = chart.refresh_count
    for i in range(300):
        chart.append(i * 0.1, {"toks": value})
    qtbot.waitUntil(lambda: chart.refresh_count > drawn, timeout=10_000)  # hang bound
    qtbot.wait(200)
    chart.viewport().repaint()
    return chart


def test_a_level_lines_label_never_hides_the_curve_it_sits_on(qtbot) -> None:
    """The projection's label over a tok/s curve running through it: the curve's colour is still
    drawn inside the label's box (it hid behind the label's fill for the first ~30 s of a dense
    run, when the curve and the projection were close). Read from the rendered pixels."""
    from PySide6.QtGui import QColor

    from shardscope.app.run_view.charts import COLORS

    first = _tok_chart(qtbot, 20.0)  # where the label sits, on the same axes (0 to 1.33 x 20)
    box = first.level_line("projected").label.sceneBoundingRect()
    y_mid = first.plot_item("toks").vb.mapSceneToView(box.center()).y()
    chart = _tok_chart(qtbot, y_mid)  # a curve through the label's middle
    box = chart.level_line("projected").label.sceneBoundingRect()
    image = chart.grab().toImage()
    origin = chart.viewport().mapTo(chart, chart.mapFromScene(box.topLeft()))
    want = QColor(COLORS["toks"])
    seen = 0
    for x in range(origin.x(), origin.x() + int(box.width())):
        for y in range(origin.y(), origin.y() + int(box.height())):
            c = image.pixelColor(x, y)
            if abs(c.red() - want.red()) + abs(c.green() - want.green()) + abs(c.blue() - want.blue()) < 40:
                seen += 1
    assert seen >= box.width() / 4, f"the tok/s curve shows in {seen} pixels of the label's {box.width():.0f}-px width"


def _points_under_legends(chart) -> list[str]:
    """Every drawn curve point (in view) that lies inside its plot's legend, read from the scene."""
    from PySide6.QtCore import QPointF

    hits = []
    for key in ("memory", "ssd", "hit", "toks", "per_token"):
        item = chart.plot_item(key)
        legend, vb = item.legend, item.getViewBox()
        if item not in chart.ci.items or legend is None or not legend.items or not legend.isVisible():
            continue
        box = legend.sceneBoundingRect()
        (x0, x1), _ = vb.viewRange()
        for curve in item.listDataItems():
            if not curve.isVisible():
                continue
            xs, ys = curve.getData()
            if xs is None:
                continue
            for x, y in zip(xs, ys):
                if x0 <= x <= x1 and y == y and box.contains(vb.mapViewToScene(QPointF(float(x), float(y)))):
                    hits.append(f"{key}: {curve.name()} at ({x:.1f}, {y:.1f})")
                    break
    return hits


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_no_legend_over_a_curve_point(qtbot, window, size, moe) -> None:
    """Issue 48, item 7: legends over the memory lines and a 100 % hit rate. Each curve runs up to its
    plot's top at the newest samples (the right end, under the right-aligned legends), hit rates at
    100 %; no curve point may fall inside a legend."""
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=60_000)  # hang bound
    window.resize(*size)
    window.show()
    qtbot.waitExposed(window)
    chart = window.chart
    show_expert_row(chart, moe)
    keys = chart.curve_keys()
    percent = {"hit", "ontime", "expert_hit", "spec"}
    for i in range(900):
        t = i * 0.1
        ramp = 40.0 + 60.0 * i / 899  # the largest values at the right end
        chart.append(t, {k: (100.0 if k in percent else ramp * (1 + 0.1 * n)) for n, k in enumerate(keys)})
    qtbot.wait(300)
    drawn = chart.refresh_count
    chart.append(90.0, {k: (100.0 if k in percent else 100.0) for k in keys})
    qtbot.waitUntil(lambda: chart.refresh_count > drawn, timeout=10_000)  # hang bound
    chart.viewport().repaint()
    assert not _points_under_legends(chart), _points_under_legends(chart)
