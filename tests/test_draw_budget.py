"""The draw budget: a widget's measured frame cost sets how often it may redraw (widgets/draw_budget.py).
Hand-worked numbers: a 50 ms frame at 5 % of a core may come once a second (0.050 / 0.05 = 1.0 s)."""

from __future__ import annotations

import pytest

from shardscope.widgets.draw_budget import DrawBudget


def test_a_costly_frame_waits_cost_over_duty():
    b = DrawBudget(max_hz=12, duty=0.05)
    b.spent(0.050)
    assert b.interval_ms() == 1000  # 0.050 s / 0.05
    assert b.share(1000) == pytest.approx(0.05)


def test_a_cheap_frame_gets_the_asked_rate_and_a_slow_one_the_floor():
    b = DrawBudget(max_hz=12, duty=0.05, min_hz=0.5)
    b.spent(0.001)  # 0.001 / 0.05 = 20 ms, under 1/12 s
    assert b.interval_ms() == 83  # round(1000 / 12)
    b = DrawBudget(max_hz=12, duty=0.05, min_hz=0.5)
    b.spent(1.0)  # 20 s by the duty; the floor says 2 s
    assert b.interval_ms() == 2000


def test_the_average_follows_new_costs_gradually():
    b = DrawBudget(max_hz=100, duty=0.1, smoothing=0.5)
    b.spent(0.010)  # the first draw sets the average
    b.spent(0.030)  # halfway: 0.020
    assert b.cost_s == pytest.approx(0.020)
    assert b.interval_ms() == 200  # 0.020 / 0.1


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        DrawBudget(max_hz=0, duty=0.05)
    with pytest.raises(ValueError):
        DrawBudget(max_hz=10, duty=1.5)
