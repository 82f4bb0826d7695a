"""Sweep and auto-tune vary only knobs the open model's run reads (issue 32): on an MoE file whose
experts stream, shard size and prefetch depth (greyed "experts stream" in the window) are not
prefilled as lists — all nine runs of the old shard x depth grid read the same bytes — and the
plot's lines are a knob that varied; on a dense model auto-tune offers no expert lists and its
Best line names no expert setting. Before Start the sweep's bar says the runs its text says."""

from __future__ import annotations

import math
import re

import pytest

from shardscope.engine.knobs.knobs import EXPERT_KNOBS, LAYER_KNOBS
from shardscope.engine.knobs.settings import RunSettings
from tests.conftest import make_window, wait_for


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe-search") / "moe-120.gguf"
    write_synthetic_model(path, 120, moe=MoeSpec(16, 2, routing_skew=2.0), seed=3)
    return str(path)


def test_sweep_on_an_moe_file_varies_only_knobs_that_matter(qtbot, tmp_path, moe_file):
    window = make_window(qtbot, tmp_path / "config", model_path=moe_file)
    try:
        window.apply_settings(RunSettings(budget_mb=60, n_gen=8, n_ctx=128))
        dialog = window.open_sweep_dialog()
        grid = dialog.fields.parse()
        for key in LAYER_KNOBS:  # one value each, greyed as in the window
            assert len(grid[key]) == 1 and not dialog.fields.edits[key].isEnabled(), (key, grid[key])
        varied = [k for k, v in grid.items() if len(v) > 1]
        assert varied and set(varied) <= set(EXPERT_KNOBS) | {"budget_mb", "threads"}, grid
        # Before Start: the bar's N is the text's N.
        dialog.fields.set_text("expert_policy", "decay,lru")
        dialog.fields.set_text("trunk_share", "0")  # the split's own sweep is bench/goals/trunk_split.py
        dialog.tokens_spin.setValue(3)
        text = dialog.show_cost()
        runs = int(re.match(r"Start: (\d+) runs", text).group(1))
        assert runs == math.prod(len(v) for v in dialog.fields.parse().values()) == 2
        assert (dialog.progress.value(), dialog.progress.maximum()) == (0, runs)
        dialog.start()
        wait_for(qtbot, window, lambda: not dialog.runner.busy(), 180_000)
        assert [r.error for r in dialog.results if not r.ok] == []
        # The plot's x axis is the knob that varied; no line per an idle knob's value.
        assert dialog.knobs == ["expert_policy"]
        assert [c.label for c in dialog.plot.curves] == ["all"]
        assert {p[0] for c in dialog.plot.curves for p in c.points} == {"decay", "lru"}
    finally:
        window.close()


def test_auto_tune_on_a_dense_model_offers_and_names_no_expert_settings(qtbot, tmp_path):
    window = make_window(qtbot, tmp_path / "config")
    try:
        assert window.model_info.moe is None
        window.apply_settings(window.current_settings().with_changes(budget_mb=200, n_gen=4))
        dialog = window.open_tune_dialog()
        cands = dialog.fields.parse()
        for key in EXPERT_KNOBS:
            if key in cands:
                assert len(cands[key]) == 1 and not dialog.fields.edits[key].isEnabled(), (key, cands[key])
        # One candidate, one pass: a real run, then the Best line.
        for key, values in cands.items():
            dialog.fields.set_text(key, str(values[0]))
        dialog.tokens_spin.setValue(2)
        dialog.passes_spin.setValue(1)
        dialog.start()
        wait_for(qtbot, window, lambda: not dialog.runner.busy(), 120_000)
        assert dialog.result is not None and dialog.result.best is not None, dialog.message
        runs = [line for line in dialog.log.toPlainText().splitlines() if line.startswith("run ")]
        best = dialog.best_label.text() + "\n" + "\n".join(runs)  # (the engine's search path is its own)
        for word in ("expert", "speculation", "decay"):
            assert word not in best, best
        assert "shard" in best  # the dense knobs are named
    finally:
        window.close()


def test_a_kept_sweep_dialog_takes_the_lists_of_the_model_opened_since(qtbot, tmp_path, moe_file):
    window = make_window(qtbot, tmp_path / "config")
    try:
        window.apply_settings(window.current_settings().with_changes(budget_mb=200))
        sweep, tune = window.open_sweep_dialog(), window.open_tune_dialog()
        assert len(sweep.fields.parse()["shard_mb"]) > 1  # a dense model: shards vary
        sweep.hide()
        tune.hide()
        window.open_model(moe_file)
        qtbot.waitUntil(lambda: window.model_info.path == moe_file, timeout=20_000)
        window.controls.commit("budget_mb", 60)
        sweep, tune = window.open_sweep_dialog(), window.open_tune_dialog()
        for dialog in (sweep, tune):
            grid = dialog.fields.parse()
            assert all(len(grid[k]) == 1 for k in LAYER_KNOBS if k in grid), grid
        assert len(sweep.fields.parse()["expert_policy"]) > 1
    finally:
        window.close()
