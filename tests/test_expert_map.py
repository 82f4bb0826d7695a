"""The expert map draws what it is told: states, picked experts, heat, at 8×16 and 61×384."""

import numpy as np
from PySide6.QtCore import QPoint
from PySide6.QtGui import QColor

from shardscope.widgets import EVICTED, LOADING, PINNED, RESIDENT, STATE_COLORS
from shardscope.widgets.expert_map import PICKED_COLOR, ExpertMap


def _rgb(hex_color):
    c = QColor(hex_color)
    return (c.red(), c.green(), c.blue())


def test_states_and_picks_draw_their_colours(qtbot):
    m = ExpertMap()
    qtbot.addWidget(m)
    m.set_shape(8, 16)
    states = np.full((8, 16), EVICTED, dtype=np.uint8)
    states[0, :4] = PINNED
    states[2, 5] = RESIDENT
    states[3, 7] = LOADING
    m.set_states(states)
    picked = np.zeros((8, 16), dtype=bool)
    picked[2, 5] = True
    m.set_picked(picked)
    assert m.cell_rgb(0, 0) == _rgb(STATE_COLORS[PINNED])
    assert m.cell_rgb(3, 7) == _rgb(STATE_COLORS[LOADING])
    assert m.cell_rgb(7, 15) == _rgb(STATE_COLORS[EVICTED])
    assert m.cell_rgb(2, 5) == _rgb(PICKED_COLOR)
    assert "picked by this token" in m.describe_cell(2, 5)


def test_heat_view_scales_by_pick_count(qtbot):
    m = ExpertMap()
    qtbot.addWidget(m)
    m.set_shape(2, 4)
    m.set_view("heat")
    m.set_heat([[0, 1, 2, 4], [0, 0, 0, 0]], window=8)
    never, most = m.cell_rgb(0, 0), m.cell_rgb(0, 3)
    assert never == (255, 255, 255)
    assert most[1] < m.cell_rgb(0, 1)[1] < never[1]  # darker with more picks
    assert "picked 4 of the last 8 tokens" in m.describe_cell(0, 3)


def test_kimi_scale_map_renders_and_finds_the_cell_under_the_mouse(qtbot):
    m = ExpertMap()
    qtbot.addWidget(m)
    m.resize(900, 400)
    m.show()
    m.set_shape(61, 384)
    states = np.random.default_rng(0).integers(0, 4, size=(61, 384)).astype(np.uint8)
    m.set_states(states)
    m.set_current_layer(30)
    image = m.grab().toImage()
    assert image.width() == 900
    rect = m._grid_rect()
    cell = m.cell_at(QPoint(rect.right(), rect.bottom()))
    assert cell == (60, 383)
    assert m.cell_at(QPoint(0, 0)) is None


def test_cacheability_plot_holds_the_points_and_emits_a_chosen_size(qtbot):
    from shardscope.widgets.cacheability_plot import CacheabilityPlot

    plot = CacheabilityPlot()
    qtbot.addWidget(plot)
    pts = {"lru": [(100, 0.3), (50, 0.12)], "hot": [(50, 0.2), (100, 0.45)]}
    plot.set_curves(pts)
    plot.set_projected([(50, 1.0), (100, 2.0)], "iPhone 16 Pro")
    plot.set_current(100)
    assert plot.curves()["lru"] == [(50.0, 0.12), (100.0, 0.3)]
    assert plot.current() == 100.0
    assert plot.nearest_size(60) == 50.0
    with qtbot.waitSignal(plot.size_chosen) as got:
        plot.size_chosen.emit(plot.nearest_size(90))
    assert got.args == [100.0]


def test_the_drawn_map_shows_each_cells_colour(qtbot):
    """What reaches the screen (a grab), not the map's own pixel array: the map is drawn as a
    same-size blit of its own scaling, and a wrong channel order or scale would show here."""
    m = ExpertMap()
    qtbot.addWidget(m)
    m.resize(700, 300)
    m.show()
    m.set_shape(5, 128)
    states = np.full((5, 128), EVICTED, dtype=np.uint8)
    states[1, 3] = PINNED
    states[4, 127] = LOADING
    states[2, 64] = RESIDENT
    m.set_states(states)
    image = m.grab().toImage()
    rect = m._grid_rect()
    for layer, expert, colour in ((1, 3, STATE_COLORS[PINNED]), (4, 127, STATE_COLORS[LOADING]),
                                  (2, 64, STATE_COLORS[RESIDENT]), (0, 0, STATE_COLORS[EVICTED])):
        x = rect.left() + (2 * expert + 1) * rect.width() // (2 * 128)
        y = rect.top() + (2 * layer + 1) * rect.height() // (2 * 5)
        assert m.cell_at(QPoint(x, y)) == (layer, expert)
        pixel = image.pixelColor(x, y)
        assert (pixel.red(), pixel.green(), pixel.blue()) == _rgb(colour), (layer, expert)
