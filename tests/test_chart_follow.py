"""Issue 48, item 6: a chart that stopped following says so. A pan inside a plot shows
"paused at t = … — End or double-click to follow" over the top plot's title row while samples
keep coming; a double-click (or End's follow_latest) follows again and the banner goes. Titles
cut to their row end at a word, with the whole title in the tooltip (item 7).
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QFont, QFontMetrics

from shardscope.app.run_view.charts import build_run_chart
from shardscope.widgets.live_chart import elide_words


def _chart(qtbot):
    chart = build_run_chart()
    qtbot.addWidget(chart)
    chart.resize(900, 700)
    chart.show()
    qtbot.waitExposed(chart)
    for i in range(1200):  # 120 s at 10 Hz
        chart.append(i * 0.1, {k: 10.0 + i % 7 for k in chart.curve_keys()})
    return chart


def _redrawn(qtbot, chart) -> None:
    drawn = chart.refresh_count
    qtbot.waitUntil(lambda: chart.refresh_count > drawn, timeout=10_000)  # hang bound


def _pan(chart, x0: float, x1: float) -> None:
    """What a drag inside a plot does: the view moves and the view box says a user moved it."""
    vb = chart.plot_item("memory").getViewBox()
    vb.setXRange(x0, x1, padding=0)
    vb.sigRangeChangedManually.emit(vb.state["mouseEnabled"])


def test_a_panned_chart_says_it_is_paused_and_a_double_click_follows_again(qtbot) -> None:
    chart = _chart(qtbot)
    _redrawn(qtbot, chart)
    assert chart.is_following() and chart.paused_text() == ""
    _pan(chart, 20.0, 80.0)
    _redrawn(qtbot, chart)
    assert not chart.is_following()
    text = chart.paused_text()
    assert text.startswith("paused at t = 80 s") and "End or double-click to follow" in text, text
    assert chart.paused_label.isVisible()
    # samples keep coming: the banner says how far live has gone, the view stays where it was
    for i in range(1200, 1300):
        chart.append(i * 0.1, {k: 12.0 for k in chart.curve_keys()})
    _redrawn(qtbot, chart)
    assert "(live 130 s)" in chart.paused_text(), chart.paused_text()
    assert chart.plot_item("memory").getViewBox().viewRange()[0][1] == 80.0
    # the banner sits in the title row, right of the (elided) title: over no curve, no title text
    banner = chart.paused_label.geometry()
    title = chart.mapFromScene(chart.plot_item("memory").titleLabel.sceneBoundingRect()).boundingRect()
    assert banner.top() < title.bottom() + 4
    view = chart.mapFromScene(chart.plot_item("memory").getViewBox().sceneBoundingRect()).boundingRect()
    assert banner.bottom() <= view.top() + 2, (banner, view)
    shown_title = chart.plot_item("memory").titleLabel.text
    fm = QFontMetrics(QFont(chart.font()))
    assert fm.horizontalAdvance(shown_title) < banner.left(), shown_title

    centre = chart.mapFromScene(chart.plot_item("toks").getViewBox().sceneBoundingRect().center())
    qtbot.mouseDClick(chart.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(centre.x(), centre.y()))
    _redrawn(qtbot, chart)
    assert chart.is_following() and chart.paused_text() == "" and not chart.paused_label.isVisible()
    assert chart.plot_item("memory").getViewBox().viewRange()[0][1] > 129


def test_follow_latest_also_ends_the_pause(qtbot) -> None:
    chart = _chart(qtbot)
    _pan(chart, 10.0, 40.0)
    _redrawn(qtbot, chart)
    assert chart.paused_text()
    chart.follow_latest()  # Run -> Follow latest (End)
    _redrawn(qtbot, chart)
    assert chart.paused_text() == ""


def test_titles_are_cut_at_a_word_with_the_whole_title_in_the_tooltip(qtbot) -> None:
    fm = QFontMetrics(QFont())
    text = "Cache hits, on time (per s or token)"
    for width in range(40, fm.horizontalAdvance(text) + 1, 7):
        cut = elide_words(fm, text, width)
        assert fm.horizontalAdvance(cut) <= width
        if cut != text and " " in cut:
            assert cut.endswith("\u2026")
            assert text.startswith(cut[:-1].rstrip()), cut
            rest = text[len(cut[:-1].rstrip()):]
            assert rest[:1] in (" ", ",", ""), f"{cut!r} ends mid-word"
    chart = build_run_chart()
    qtbot.addWidget(chart)
    chart.resize(380, 700)
    chart.show()
    qtbot.waitExposed(chart)
    chart.append(0.0, {"rss": 1.0})
    _redrawn(qtbot, chart)
    label = chart.plot_item("ssd").titleLabel
    assert label.toolTip() == "SSD reads (read_bytes; 1 MB = 10\u2076 B, as the emulated SSD)"


def test_a_narrow_chart_shows_a_shorter_banner_that_leaves_the_title_room(qtbot) -> None:
    chart = _chart(qtbot)
    chart.resize(350, 600)  # the charts' column at 1280 x 800 with the expert column shown
    _pan(chart, 20.0, 80.0)
    _redrawn(qtbot, chart)
    assert chart.paused_text().endswith("End or double-click to follow")  # the whole text, also on hover
    shown = chart.paused_label.text()
    assert shown.startswith("paused at t = 80 s") and chart.paused_label.width() <= 0.7 * chart.viewport().width()
    assert chart.paused_text() in chart.paused_label.toolTip()
