"""Issue 48, item 4: the sliders offer only what runs. Every slider dragged to both ends and
stepped with the keyboard: no modal dialog opens, and the engine's own check (check_run, what
Run and a live change refuse by) accepts every value offered, for a dense model (the bundled
gemma) and an MoE model whose experts stream. Ranges follow the budget and the model; a value
moved inside them is said beside the slider.
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from conftest import make_window
from shardscope.app.files.knob_limits import refusal
from shardscope.engine.layout.budget_minimum import minimum_for
from shardscope.engine.runs.run_factory import check_run


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("slider-moe") / "moe.gguf"
    write_synthetic_model(path, 60, n_layers=4, moe=MoeSpec(16, 2))
    return str(path)


def _no_dialog(window, errors: list[str]) -> None:
    assert QApplication.activeModalWidget() is None
    shown = [w for w in QApplication.topLevelWidgets() if isinstance(w, QMessageBox) and w.isVisible()]
    assert not shown, [w.text() for w in shown]
    assert not errors, errors


def _runs(window) -> None:
    settings = window.current_settings()
    exc = refusal(settings)
    assert exc is None, f"{settings}: {exc}"


def _drag(qtbot, slider, position: int) -> None:
    """A drag: pressed, moved, let go (valueCommitted fires on release)."""
    s = slider.slider
    s.setSliderDown(True)
    s.setSliderPosition(position)
    s.setSliderDown(False)


def _exercise(qtbot, window, errors) -> dict[str, int]:
    controls, stepped = window.controls, {}
    for key, slider in controls.sliders.items():
        s = slider.slider
        if not s.isEnabled():
            continue
        for end in (s.maximum(), s.minimum(), s.maximum()):
            _drag(qtbot, slider, end)
            _no_dialog(window, errors)
            _runs(window)
        # keyboard: Home, then single steps up through the range (page steps past the first 40), End
        s.setFocus()
        qtbot.keyClick(s, Qt.Key.Key_Home)
        _no_dialog(window, errors)
        _runs(window)
        n = 0
        while s.value() < s.maximum():
            before = s.value()
            qtbot.keyClick(s, Qt.Key.Key_Right if n < 40 else Qt.Key.Key_PageUp)
            assert s.value() > before, f"{key}: a step from {before} went nowhere"
            _no_dialog(window, errors)
            _runs(window)
            n += 1
        qtbot.keyClick(s, Qt.Key.Key_End)
        _runs(window)
        stepped[key] = n
        # every value the slider offers runs (the ends and every 25th between)
        offered = controls.offered(key)
        for value in offered[:: max(1, len(offered) // 25)] + offered[-1:]:
            exc = refusal(window.current_settings(), **{key: value})
            assert exc is None, f"{key} = {value} is offered, the engine refuses it: {exc}"
        qtbot.keyClick(s, Qt.Key.Key_Home)
    return stepped


def test_every_slider_offers_only_values_that_run_dense(qtbot, tmp_path) -> None:
    window = make_window(qtbot, tmp_path / "config")
    errors: list[str] = []
    window.message_hook = errors.append
    try:
        stepped = _exercise(qtbot, window, errors)
        assert {"budget_mb", "shard_mb", "prefetch_depth", "threads"} <= set(stepped)
        budget = window.controls.sliders["budget_mb"].slider
        qtbot.keyClick(budget, Qt.Key.Key_Home)
        floor = minimum_for(window.current_settings().with_changes(model_path=window.model_info.path)).mb
        assert budget.minimum() == floor == window.controls.value("budget_mb")  # the engine's one minimum
        check_run(window.current_settings())
        with pytest.raises(Exception):
            check_run(window.current_settings().with_changes(budget_mb=floor - 1))  # one less is refused
        assert window.notes().get("budget_mb", "").startswith(f"{floor:,} MiB: the least")
    finally:
        window.close()


def test_every_slider_offers_only_values_that_run_moe(qtbot, tmp_path, moe_file) -> None:
    window = make_window(qtbot, tmp_path / "config", model_path=moe_file)
    errors: list[str] = []
    window.message_hook = errors.append
    try:
        window.apply_settings(window.current_settings().with_changes(budget_mb=40, expert_cache_mb=0))
        cache = window.controls.sliders["expert_cache_mb"]
        assert cache.slider.isEnabled() and cache.readout().startswith("auto")
        # the first keyboard step from "auto" is the smallest cache the engine takes, not 1 MiB
        cache.slider.setFocus()
        qtbot.keyClick(cache.slider, Qt.Key.Key_Home)
        qtbot.keyClick(cache.slider, Qt.Key.Key_Right)
        low = window.controls.value("expert_cache_mb")
        assert low > 0 and refusal(window.current_settings()) is None
        assert refusal(window.current_settings().with_changes(expert_cache_mb=low - 1)) is not None or low == 1
        _no_dialog(window, errors)
        qtbot.keyClick(cache.slider, Qt.Key.Key_Home)
        assert window.controls.value("expert_cache_mb") == 0
        stepped = _exercise(qtbot, window, errors)
        assert "expert_cache_mb" in stepped
    finally:
        window.close()


def test_a_smaller_budget_moves_the_expert_cache_inside_and_says_so(qtbot, tmp_path, moe_file) -> None:
    window = make_window(qtbot, tmp_path / "config", model_path=moe_file)
    errors: list[str] = []
    window.message_hook = errors.append
    try:
        window.apply_settings(window.current_settings().with_changes(budget_mb=40, expert_cache_mb=30))
        assert window.controls.value("expert_cache_mb") == 30
        budget = window.controls.sliders["budget_mb"]
        _drag(qtbot, budget, 20)  # leaves the experts less than 30 MiB
        cache = window.controls.value("expert_cache_mb")
        assert 0 < cache < 30
        assert refusal(window.current_settings()) is None
        assert window.controls.sliders["expert_cache_mb"].slider.maximum() == cache
        note = window.notes()["expert_cache_mb"]
        assert note.startswith(f"expert cache 30\u2192{cache} MiB") and "budget 20 MiB" in note, note
        _no_dialog(window, errors)
    finally:
        window.close()
