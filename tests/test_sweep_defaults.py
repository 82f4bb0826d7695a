"""Sweep and auto-tune prefill lists that all run on the open model and budget: the window's
first sweep on the bundled model runs every prefilled combination (none skipped), and
both dialogs say before Start how many runs and about how long."""

from __future__ import annotations

import math

from conftest import stop_and_wait, wait_for
from shardscope.app.search.runnable_lists import combinations, engine_refusal, runnable_grid
from shardscope.engine.knobs.settings import RunSettings


def test_runnable_grid_drops_the_refused_values_and_keeps_the_rest():
    # A made-up floor: shard + 50 * depth must stay <= 100 (large shards and deep prefetch refused).
    def refusal(s: RunSettings):
        return "too big" if s.shard_mb + 50 * s.prefetch_depth > 100 else None

    proposed = {"shard_mb": [16, 32, 64], "prefetch_depth": [0, 1, 2]}
    grid = runnable_grid(RunSettings(), proposed, refusal)
    assert all(refusal(s) is None for s in combinations(RunSettings(), grid))
    # Halving the shard sizes down to 1,2,4 never clears depth 2 (104 > 100): values are dropped.
    assert grid == {"shard_mb": [16, 32], "prefetch_depth": [0, 1]}

    # A floor of 110: the shard sizes halve (16,32,64 → 2,4,8) and all nine combinations stay.
    def softer(s: RunSettings):
        return "too big" if s.shard_mb + 50 * s.prefetch_depth > 110 else None

    assert runnable_grid(RunSettings(), proposed, softer) == {"shard_mb": [2, 4, 8], "prefetch_depth": [0, 1, 2]}
    # Nothing runs: each knob falls back to the base settings' own value.
    base = RunSettings(shard_mb=8, prefetch_depth=3)
    assert runnable_grid(base, {"shard_mb": [16], "prefetch_depth": [0]}, lambda s: "no") == \
        {"shard_mb": [8], "prefetch_depth": [3]}


def test_the_issue_budget_once_skipped_8_of_9(bundled_model):
    # The window's 200 MB on the bundled model: the old prefill (16,32,64 x 0-2) had 8 refused.
    base = RunSettings(budget_mb=200, model_path=bundled_model)
    proposed = {"shard_mb": [16, 32, 64], "prefetch_depth": [0, 1, 2]}
    refused = [s for s in combinations(base, proposed) if engine_refusal(s)]
    assert refused, "the engine's minimum no longer refuses any: this test lost its point"
    grid = runnable_grid(base, proposed)
    kept = combinations(base, grid)
    assert len(kept) == 9 and not [s for s in kept if engine_refusal(s)], grid


def test_the_sweep_dialog_defaults_on_the_bundled_model_all_run(qtbot, window):
    w = window
    w.apply_settings(w.current_settings().with_changes(budget_mb=200))
    dialog = w.open_sweep_dialog()  # its prefill reads the window's model and budget now
    grid = dialog.fields.parse()
    total = math.prod(len(v) for v in grid.values())
    assert total >= 2, f"the prefill should still sweep something: {grid}"
    dialog.tokens_spin.setValue(2)
    text = dialog.show_cost()
    # Before Start: the number of runs; no time yet (no round has run in this window).
    assert text.startswith(f"Start: {total} runs of 2 tokens") and "skipped" not in text, text
    assert "press Run once for a time estimate" in text

    dialog.start()
    wait_for(qtbot, w, lambda: not dialog.runner.busy(), 240_000)
    assert len(dialog.results) == total
    assert [r for r in dialog.results if not r.ok] == [], [r.error for r in dialog.results if not r.ok]
    assert all(r.summary.n_gen == 2 and r.summary.budget_mb == 200 for r in dialog.results)
    assert dialog.message.startswith(f"done: {total} / {total} runs") and f"{total} ran, 0 skipped" in dialog.message


def test_tune_defaults_all_run_and_both_dialogs_give_a_time_once_a_round_ran(qtbot, window):
    w = window
    w.apply_settings(w.current_settings().with_changes(budget_mb=200, n_gen=4))
    tune = w.open_tune_dialog()
    cands = tune.fields.parse()
    base = w.current_settings()
    assert not [s for s in combinations(base, cands) if engine_refusal(s)]
    assert tune.show_cost().startswith("Start: at most ")

    w.start_run()
    wait_for(qtbot, w, lambda: w.last_round is not None and not w.last_round.stopped, 60_000)
    stop_and_wait(qtbot, w)
    r = w.last_round
    per_run = r.ttft_ms / 1000 + 5 / r.avg_ts  # 6 tokens: the first at TTFT, 5 at the round's tok/s
    text = tune.show_cost()
    assert "about " in text and f"TTFT {r.ttft_ms:,.0f} ms" in text, text
    sweep = w.open_sweep_dialog()
    sweep.tokens_spin.setValue(6)
    runs = math.prod(len(v) for v in sweep.fields.parse().values())
    from shardscope.engine.measure.progress_words import clock
    rounds = 1 + sweep.rounds_spin.value()  # a cold round and the warm ones of its interval, each run
    assert f"about {clock(runs * rounds * per_run)}" in sweep.show_cost()
