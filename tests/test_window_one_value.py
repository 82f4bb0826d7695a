"""Issue 28, item 11: the window says what the run will do, in full — without starting a run.

Layer-streaming knobs greyed (with why) while an MoE model's experts stream; the expert cache
slider at 0 reads the cache the engine will take (expert_run.cache_bytes_for), not "0 MB";
map legends wrap instead of being cut; the Shards legend says no "global 0".
"""

from __future__ import annotations

import pytest

from conftest import make_window
from shardscope.engine.base.units import MIB
from shardscope.engine.experts.expert_run import cache_bytes_for
from shardscope.engine.knobs.knobs import LAYER_KNOBS


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("window-moe") / "moe.gguf"
    write_synthetic_model(path, 60, n_layers=4, moe=MoeSpec(16, 2))
    return str(path)


def _tip(window, key: str) -> str:
    controls = window.controls
    widget = controls.sliders.get(key) or controls.combos.get(key) or controls.checks.get(key)
    return widget.toolTip() if key not in controls.sliders else widget.slider.toolTip()


def test_layer_knobs_grey_while_experts_stream_and_the_cache_slider_names_the_cache(qtbot, tmp_path, moe_file):
    window = make_window(qtbot, tmp_path / "config", model_path=moe_file)
    moe = window.model_info.moe
    window.apply_settings(window.current_settings().with_changes(budget_mb=40, expert_cache_mb=0))
    for key in LAYER_KNOBS:
        assert "routed experts stream" in _tip(window, key), (key, _tip(window, key))
    assert window.controls.sliders["shard_mb"].disabledReason() == "experts stream"
    assert not window.controls.combos["policy"].isEnabled()
    engine_cache = cache_bytes_for(moe, window.current_settings()) / MIB
    readout = window.controls.sliders["expert_cache_mb"].readout()
    assert readout == f"auto {engine_cache:,.0f} MiB", readout
    assert window.expert_panel.plot.current() == pytest.approx(engine_cache)  # the curve's "current" line
    # A budget the whole model fits in: nothing streams, the layer knobs are live again.
    window.apply_settings(window.current_settings().with_changes(budget_mb=512))
    assert window.controls.sliders["shard_mb"].disabledReason() is None
    assert window.controls.combos["policy"].isEnabled()
    assert window.controls.sliders["expert_cache_mb"].readout() == "0 MiB"


def test_map_legends_wrap_inside_their_width(qtbot):
    from PySide6.QtGui import QFontMetrics

    from shardscope.widgets import ExpertMap
    from shardscope.widgets.shard_map import GLOBAL, RESIDENT, ShardMap
    from shardscope.widgets.swatch_legend import _placed

    m = ExpertMap()
    qtbot.addWidget(m)
    m.set_shape(4, 64)
    m.resize(260, 200)
    fm = QFontMetrics(m.font())
    items = m._legend_items()
    for x, _line, (_c, name) in _placed(fm, items, m.width()):
        assert x + 14 + fm.horizontalAdvance(name) <= m.width(), name  # "picked now" is not cut
    assert max(line for _x, line, _i in _placed(fm, items, m.width())) >= 1  # it wrapped

    s = ShardMap()
    qtbot.addWidget(s)
    s.set_shards(["a", "b"])
    s.set_states([RESIDENT, RESIDENT])
    assert not any(text.startswith("global") for _c, text in s.legend_items())  # no "global 0"
    s.set_states([GLOBAL, RESIDENT])
    assert any(text == "global 1" for _c, text in s.legend_items())
