"""The widgets hold their contracts with the app: bounded memory, appends that never draw, no
flood of commits from a drag, exact read-outs. Everything runs offscreen; an append's cost is
bench/goals/chart_append.py's (speed goals live in bench/)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QGridLayout, QLabel, QWidget

from shardscope.widgets import (
    EVICTED,
    GLOBAL,
    LOADING,
    PINNED,
    RESIDENT,
    STATE_COLORS,
    LabelledSlider,
    LiveChart,
    NumbersPanel,
    ShardMap,
    format_number,
)
from shardscope.widgets.live_chart import GAP_S


def make_chart(qtbot, capacity: int = 6000, refresh_hz: float = 50.0) -> LiveChart:
    chart = LiveChart(capacity=capacity, refresh_hz=refresh_hz)
    qtbot.addWidget(chart)
    chart.add_plot("mem", "Memory", "MB")
    chart.add_curve("mem", "rss", "RSS", "#1f77b4", fill_to_zero=True)
    chart.add_curve("mem", "resident", "Resident shards", "#2ca02c")
    chart.add_level_line("mem", "budget", "budget", "#d62728")
    chart.add_plot("io", "SSD read", "MB/s")
    chart.add_curve("io", "read", "read", "#ff7f0e")
    chart.add_level_line("io", "ssd", "emulated SSD", "#9467bd")
    chart.add_plot("speed", "Generation", "tok/s")
    chart.add_curve("speed", "tps", "tok/s", "#17becf")
    chart.resize(700, 520)
    return chart


# -- LiveChart -----------------------------------------------------------------------------
def test_ring_buffer_keeps_newest_capacity_points(qtbot) -> None:
    chart = make_chart(qtbot)
    for i in range(7000):
        chart.append(i * 0.1, {"rss": float(i), "read": 2.0 * i})
    assert chart.point_count("rss") == 6000
    x, y = chart.curve_data("rss")
    assert len(x) == len(y) == 6000
    assert y[-1] == 6999.0 and y[0] == 1000.0
    assert np.allclose(np.diff(x), 0.1)
    assert np.all(np.diff(y) == 1.0)  # order survives the buffer shifts
    _, tps = chart.curve_data("tps")  # never given a value: held as gaps
    assert np.isnan(tps).all()


def test_ring_buffer_small_capacity_many_wraps(qtbot) -> None:
    chart = make_chart(qtbot, capacity=5)
    for i in range(23):
        chart.append(float(i), {"rss": float(i)})
    x, y = chart.curve_data("rss")
    assert list(y) == [18.0, 19.0, 20.0, 21.0, 22.0]
    assert list(x) == list(y)


def test_curve_added_mid_run_has_gap_history(qtbot) -> None:
    chart = make_chart(qtbot)
    for i in range(10):
        chart.append(float(i), {"rss": 1.0})
    chart.add_curve("speed", "late", "late", "#000000")
    chart.append(10.0, {"late": 5.0})
    _, y = chart.curve_data("late")
    assert np.isnan(y[:10]).all() and y[10] == 5.0


def test_a_silence_is_a_gap_not_a_line(qtbot) -> None:
    """Samples that stop for longer than GAP_S (a paused or suspended run) break every curve there:
    pyqtgraph joins finite points, so without the break a straight line crossed the silence."""
    chart = make_chart(qtbot)
    for t in (0.0, 0.1, 0.2, 10.2, 10.3):
        chart.append(t, {"rss": 1.0, "read": 2.0})
    x, y = chart.curve_data("read")
    assert list(x[:3]) == [0.0, 0.1, 0.2] and list(x[-2:]) == [10.2, 10.3]
    assert np.isnan(y).sum() == 1 and 0.2 < x[np.isnan(y)][0] < 10.2
    chart.append(10.4 + GAP_S * 0.9, {"read": 3.0})  # a late sample, still no silence
    assert np.isnan(chart.curve_data("read")[1]).sum() == 1


def test_appends_never_draw(qtbot) -> None:
    """Appending only fills the buffers; drawing is the timer's (an append's cost, goal < 50 µs,
    is bench/goals/chart_append.py's ratio, not a limit here)."""
    chart = make_chart(qtbot)
    sample = {"rss": 1.0, "resident": 2.0, "read": 3.0, "tps": 4.0}
    for i in range(20000):
        chart.append(i * 0.1, sample)
    assert chart.refresh_count == 0
    x, y = chart.curve_data("rss")
    assert len(x) == 6000 and x[-1] == pytest.approx(19999 * 0.1)  # the capacity's newest points


def test_redraws_on_timer_only_when_data_arrived(qtbot) -> None:
    chart = make_chart(qtbot)
    chart.show()
    qtbot.waitExposed(chart)
    for i in range(100):
        chart.append(i * 0.1, {"rss": 100.0 + i, "read": 50.0, "tps": 12.0})
    qtbot.waitUntil(lambda: chart.refresh_count > 0, timeout=10_000)
    drawn = chart.refresh_count
    qtbot.wait(100)  # several ticks with nothing new
    assert chart.refresh_count == drawn
    chart.append(10.0, {"rss": 1.0})
    qtbot.waitUntil(lambda: chart.refresh_count > drawn, timeout=10_000)
    # The curve shows what the buffers hold.
    shown_x, shown_y = chart._curves["rss"].getOriginalDataset()
    assert shown_y[-1] == 1.0 and len(shown_x) == 101


def test_x_range_follows_latest_until_user_pans(qtbot) -> None:
    chart = make_chart(qtbot)
    chart.follow_seconds = 30.0
    chart.show()
    qtbot.waitExposed(chart)
    for i in range(1000):
        chart.append(i * 0.1, {"rss": 1.0})
    qtbot.waitUntil(lambda: chart.refresh_count > 0, timeout=10_000)
    for key in ("mem", "io", "speed"):  # linked: all plots show the same window
        lo, hi = chart.plot_item(key).getViewBox().viewRange()[0]
        assert lo == pytest.approx(99.9 - 30.0, abs=0.5) and hi == pytest.approx(99.9, abs=0.5)
    vb = chart.plot_item("io").getViewBox()
    vb.sigRangeChangedManually.emit([True, False])  # what a mouse pan emits
    vb.setXRange(10.0, 20.0, padding=0)
    chart.append(100.0, {"rss": 1.0})
    drawn = chart.refresh_count
    qtbot.waitUntil(lambda: chart.refresh_count > drawn, timeout=10_000)
    assert not chart.is_following()
    assert chart.plot_item("mem").getViewBox().viewRange()[0] == pytest.approx([10.0, 20.0])
    vb.enableAutoRange()  # the plot's "A" button
    qtbot.waitUntil(chart.is_following, timeout=10_000)


def test_level_lines_show_and_hide(qtbot) -> None:
    chart = make_chart(qtbot)
    line = chart.level_line("budget")
    assert not line.isVisible()
    chart.set_level("budget", 600.0)
    assert line.isVisible() and line.value() == 600.0
    assert "600 MB" in line.label.toPlainText()
    chart.set_level("budget", 400.0)
    assert line.value() == 400.0 and "400 MB" in line.label.toPlainText()
    chart.set_level("budget", None)
    assert not line.isVisible()
    with pytest.raises(KeyError):
        chart.set_level("nope", 1.0)


def _marker_lines(chart, key):
    return chart.marks.marker_lines(chart.plot_item(key))


def _redrawn(qtbot, chart) -> None:
    drawn = chart.refresh_count
    chart.append(chart.curve_data("rss")[0][-1] + 0.1, {"rss": 1.0})
    qtbot.waitUntil(lambda: chart.refresh_count > drawn, timeout=10_000)


def _scene_lines(chart, key):
    """Vertical line items in the plot's scene, found from outside the chart's books."""
    from PySide6.QtWidgets import QGraphicsLineItem

    return [it for it in chart.plot_item(key).getViewBox().childGroup.childItems() if isinstance(it, QGraphicsLineItem)]


def test_markers_in_the_scene_only_while_in_view(qtbot) -> None:
    """A long session's markers are history, not scene items: the repaint must cost what is
    on screen (the old chart kept up to 200 markers x every plot in the scene)."""
    chart = make_chart(qtbot)
    chart.follow_seconds = 30.0
    chart.show()
    qtbot.waitExposed(chart)
    for i in range(1000):  # 0 .. 99.9 s: the view is 69.9 .. 99.9
        chart.append(i * 0.1, {"rss": 1.0})
    for t in (10.0, 50.0, 80.0, 95.0):
        chart.mark_event(t, f"budget {t:.0f}\u2192400 MB")
    _redrawn(qtbot, chart)
    assert chart.marker_count() == 4  # all held (export, panning back)
    assert [t for t, _, _ in chart.markers_in_scene()] == [80.0, 95.0]
    for key in ("mem", "io", "speed"):
        assert sorted(line.line().x1() for line in _scene_lines(chart, key)) == [80.0, 95.0]
        lo, hi = chart.plot_item(key).getViewBox().viewRange()[1]
        for line in _scene_lines(chart, key):  # top to bottom of the plot
            assert line.line().y1() <= lo and line.line().y2() >= hi
    # The label once, on the top plot, not once per plot.
    labels = chart.marks.labels()
    assert [lb.toPlainText() for lb in labels] == ["budget 80\u2192400 MB", "budget 95\u2192400 MB"]
    assert all(lb.parentItem() is not None and lb.getViewBox() is chart.plot_item("mem").getViewBox()
               for lb in labels)
    # Panning back brings the older ones in and takes the newer out.
    vb = chart.plot_item("io").getViewBox()
    vb.sigRangeChangedManually.emit([True, False])
    vb.setXRange(0.0, 30.0, padding=0)
    _redrawn(qtbot, chart)
    assert [t for t, _, _ in chart.markers_in_scene()] == [10.0]
    assert [line.line().x1() for line in _scene_lines(chart, "io")] == [10.0]
    chart.clear()
    assert chart.marker_count() == 0 and not _scene_lines(chart, "io")


def test_markers_bounded_and_labels_never_overprint(qtbot) -> None:
    chart = make_chart(qtbot)
    chart.max_markers = 60  # the bound, not its size, is under test
    chart.follow_seconds = 30.0
    chart.show()
    qtbot.waitExposed(chart)
    for i in range(1000):
        chart.append(i * 0.1, {"rss": 1.0})
    for i in range(chart.max_markers + 40):  # a slider dragged for a while: markers 0.25 s apart
        chart.mark_event(75.0 + i * 0.25, f"p t budget {244 - i}\u2192{234 - i} MiB {{braces}}")
    _redrawn(qtbot, chart)
    assert chart.marker_count() == chart.max_markers
    in_scene = chart.markers_in_scene()
    assert 0 < len(in_scene) <= chart.max_markers_in_view
    assert len(_scene_lines(chart, "io")) == len(in_scene)
    shown = chart.marks.labels()
    assert shown and shown[-1].toPlainText() == f"p t budget {244 - 99}\u2192{234 - 99} MiB {{braces}}"
    rects = [lb.sceneBoundingRect() for lb in shown]
    for i, r in enumerate(rects):
        for other in rects[i + 1:]:
            assert not r.intersects(other), "two marker labels print over each other"
    view = chart.plot_item("mem").getViewBox().sceneBoundingRect()
    for r in rects:  # inside the plot: no fragments over the left axis
        assert view.left() <= r.left() + 1 and r.right() <= view.right() + 1
    legend = chart.plot_item("mem").legend.sceneBoundingRect()
    assert not any(r.intersects(legend) for r in rects), "a marker label under the legend"


def test_clear_empties_buffers_and_keeps_plots(qtbot) -> None:
    chart = make_chart(qtbot)
    for i in range(50):
        chart.append(float(i), {"rss": 1.0})
    chart.clear()
    assert chart.point_count("rss") == 0
    assert len(chart.ci.items) == 3  # our clear(), not GraphicsLayout.clear()
    chart.append(0.0, {"rss": 7.0})
    assert chart.curve_data("rss")[1].tolist() == [7.0]


def test_unknown_keys_are_reported(qtbot) -> None:
    chart = make_chart(qtbot)
    with pytest.raises(KeyError, match="no plot"):
        chart.add_curve("nope", "c", "c", "#000")
    with pytest.raises(ValueError):
        chart.add_curve("mem", "rss", "again", "#000")
    with pytest.raises(KeyError, match="no curve"):
        chart.point_count("nope")


def test_export_png(qtbot, tmp_path) -> None:
    chart = make_chart(qtbot)
    chart.append(0.0, {"rss": 1.0})
    chart.append(1.0, {"rss": 2.0})
    out = tmp_path / "chart.png"
    chart.export_png(str(out))
    assert out.stat().st_size > 0
    with pytest.raises(OSError, match="could not save"):
        chart.export_png(str(tmp_path / "missing-dir" / "chart.png"))


# -- LabelledSlider ------------------------------------------------------------------------
def test_slider_set_value_clamps_snaps_and_stays_quiet(qtbot) -> None:
    s = LabelledSlider("Memory budget", 100, 2000, 600, "MB", step=50)
    qtbot.addWidget(s)
    with qtbot.assertNotEmitted(s.valueCommitted):
        s.setValue(5000)
        assert s.value() == 2000
        s.setValue(-3)
        assert s.value() == 100
        s.setValue(630)
        assert s.value() == 650
        s.setRange(100, 400)
    assert s.value() == 400 and s.readout() == "400 MB"


def test_slider_keyboard_commits(qtbot) -> None:
    s = LabelledSlider("Memory budget", 100, 2000, 600, "MB", step=50)
    qtbot.addWidget(s)
    with qtbot.waitSignal(s.valueCommitted, timeout=10_000) as blocker:
        qtbot.keyClick(s.slider, Qt.Key.Key_Right)
    assert blocker.args == [650]
    assert s.value() == 650 and s.readout() == "650 MB"
    with qtbot.waitSignal(s.valueCommitted, timeout=10_000) as blocker:
        qtbot.keyClick(s.slider, Qt.Key.Key_End)
    assert blocker.args == [2000]


def test_slider_drag_commits_once_on_release(qtbot) -> None:
    s = LabelledSlider("Budget", 0, 1000, 0, "MB", step=10)
    qtbot.addWidget(s)
    committed: list[int] = []
    s.valueCommitted.connect(committed.append)
    s.slider.setSliderDown(True)  # what a mouse press on the handle does
    for v in range(0, 500, 7):
        s.slider.setSliderPosition(v)
    assert committed == []
    assert s.readout() == f"{s.value()} MB"  # live read-out while dragging
    s.slider.setSliderDown(False)  # release
    assert committed == [s.value()] and s.value() % 10 == 0


def test_slider_disabled_reason(qtbot) -> None:
    s = LabelledSlider("GPU layers", 0, 32, 0, "layers")
    qtbot.addWidget(s)
    s.setDisabledReason("no GPU offload in this build")
    assert not s.slider.isEnabled()
    assert s.readout() == "no GPU offload in this build"
    assert s.slider.toolTip() == "no GPU offload in this build"
    s.setDisabledReason(None)
    assert s.slider.isEnabled() and s.readout() == "0 layers" and s.slider.toolTip() == ""


# -- ShardMap ------------------------------------------------------------------------------
def test_shard_map_states_and_repaint_only_on_change(qtbot) -> None:
    m = ShardMap()
    qtbot.addWidget(m)
    m.set_shards([f"L{i}-{i}" for i in range(500)])
    assert m.states() == [EVICTED] * 500
    states = [i % 5 for i in range(500)]
    m.set_states(np.array(states))
    assert m.states() == states
    assert m.counts() == {EVICTED: 100, LOADING: 100, RESIDENT: 100, PINNED: 100, GLOBAL: 100}
    assert set(STATE_COLORS) == {EVICTED, LOADING, RESIDENT, PINNED, GLOBAL}

    repaints: list[int] = []
    m.update = lambda *a: repaints.append(1)  # type: ignore[method-assign]
    m.set_states(states)
    assert repaints == []
    m.set_current(3)
    m.set_current(3)
    assert repaints == [1]
    del m.update

    m.resize(m.sizeHint())
    image = m.grab().toImage()
    assert not image.isNull() and image.width() > 100
    assert m.heightForWidth(300) > m.heightForWidth(600)


def test_shard_map_hit_test_and_tiny_space(qtbot) -> None:
    m = ShardMap()
    qtbot.addWidget(m)
    m.set_shards(["a", "b", "c"])
    m.resize(400, 100)
    first = m.index_at(QPoint(4 + 2, m._grid_top() + 2))
    assert first == 0
    assert m.index_at(QPoint(399, 99)) is None
    tip = QHelpEvent(QEvent.Type.ToolTip, QPoint(4 + 2, m._grid_top() + 2), QPoint(0, 0))
    assert QApplication.sendEvent(m, tip)
    m.set_shards([str(i) for i in range(500)])
    m.resize(200, 80)
    cell, _, cols = m._grid()
    assert cell < m.cell_size  # shrinks to show all shards rather than crop
    m.set_states([RESIDENT] * 3)  # fewer states than labels: states win
    assert len(m.labels()) == 3


# -- NumbersPanel --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "\u2014"),
        (float("nan"), "\u2014"),
        ("Q4_K_M", "Q4_K_M"),
        (0, "0"),
        (7, "7"),
        (1234567, "1,234,567"),
        (np.int64(12345), "12,345"),
        (12345.678, "12,346"),
        (612.4, "612"),
        (99.96, "100"),
        (42.17, "42.2"),
        (3.14159, "3.14"),
        (0.5, "0.500"),
        (0.012345, "0.0123"),
        (np.float32(2.5), "2.50"),
        (-3.14159, "-3.14"),
        (1e-9, "0"),
        (0.0, "0"),
        (True, "yes"),
    ],
)
def test_format_number(value, text) -> None:
    assert format_number(value) == text


def test_numbers_panel(qtbot) -> None:
    p = NumbersPanel([("ttft_ms", "TTFT", "ms"), ("tps", "Generation", "tok/s"), ("read", "Bytes read", "MB")])
    qtbot.addWidget(p)
    assert p.text("ttft_ms") == "\u2014"
    p.set_value("ttft_ms", 812.345)
    assert p.text("ttft_ms") == "812"
    p.set_values({"tps": 14.26, "read": 15360, "not_a_field": 1})
    assert p.text("tps") == "14.3" and p.text("read") == "15,360"
    p.set_value("tps", None)
    assert p.text("tps") == "\u2014"
    with pytest.raises(KeyError, match="no field"):
        p.set_value("nope", 1)
    with pytest.raises(ValueError):
        NumbersPanel([("a", "A", ""), ("a", "A again", "")])


# -- the picture a human looks at ----------------------------------------------------------
def test_demo_png(qtbot, tmp_path) -> None:
    window = QWidget()
    qtbot.addWidget(window)
    grid = QGridLayout(window)
    chart = make_chart(qtbot, refresh_hz=60.0)
    rng = np.random.default_rng(0)
    for i in range(900):
        t = i * 0.1
        chart.append(
            t,
            {
                "rss": 380 + 60 * np.sin(t / 8) + rng.normal(0, 4),
                "resident": 300 + 40 * np.sin(t / 8),
                "read": max(0.0, 180 + rng.normal(0, 40)) if i % 50 > 10 else float("nan"),
                "tps": 11 + rng.normal(0, 0.7),
            },
        )
    chart.set_level("budget", 600)
    chart.set_level("ssd", 250)
    chart.mark_event(45.0, "budget 600\u2192400 MB")
    chart.follow_seconds = 60.0
    grid.addWidget(chart, 0, 0, 3, 1)

    slider = LabelledSlider("Memory budget", 100, 2000, 600, "MB", step=50)
    gpu = LabelledSlider("GPU layers", 0, 32, 0, "layers")
    gpu.setDisabledReason("no GPU offload in this build")
    sliders = QWidget()
    sl = QGridLayout(sliders)
    sl.addWidget(slider, 0, 0)
    sl.addWidget(gpu, 1, 0)
    grid.addWidget(sliders, 0, 1)

    shard_map = ShardMap()
    shard_map.set_shards([f"L{i // 2}-{i % 2}" for i in range(180)])
    shard_map.set_states([GLOBAL] * 4 + [PINNED] * 20 + [RESIDENT] * 60 + [LOADING] * 3 + [EVICTED] * 93)
    shard_map.set_current(86)
    grid.addWidget(shard_map, 1, 1)

    panel = NumbersPanel(
        [
            ("ttft_ms", "TTFT", "ms"),
            ("tps", "Generation", "tok/s"),
            ("read", "SSD bytes read", "MB"),
            ("hit", "Shard hit rate", "%"),
            ("model", "Model", ""),
        ]
    )
    panel.set_values({"ttft_ms": 812.4, "tps": 11.26, "read": 15360, "hit": 93.41, "model": "gemma3-270m Q4_K_M"})
    grid.addWidget(panel, 2, 1)
    grid.addWidget(QLabel("shardscope widgets demo"), 3, 0, 1, 2)

    window.resize(1100, 640)
    window.show()
    qtbot.waitExposed(window)
    qtbot.waitUntil(lambda: chart.refresh_count > 0, timeout=10_000)
    demo = tmp_path / "widgets_demo.png"
    assert window.grab().save(str(demo), "PNG")
    from PySide6.QtGui import QImage

    image = QImage(str(demo))  # read back: the file is a real picture of the window, not blank
    assert not image.isNull() and image.width() >= window.width() and image.height() >= window.height()
    colors = {image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 29)}
    assert len(colors) > 3
