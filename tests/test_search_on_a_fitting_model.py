"""Sweep and tune on a model that fits (issue 19, finding 6): they say so before any run,
and name a winner only when it leads by more than the run-to-run spread."""

from __future__ import annotations

from conftest import blank_summary
from shardscope.engine.cli.cli import main
from shardscope.engine.search.search_noise import NOISE_FLOOR, rank, ranking_line


def _runs(*rates, stddev=0.0, n_gen=33):
    return [blank_summary(avg_ts=r, stddev_ts=stddev, n_gen=n_gen, projected_ts=r) for r in rates]


def test_settings_within_the_spread_are_tied_not_ranked():
    groups = {"lru": _runs(10.0, 10.3), "pinned": _runs(10.1, 9.9)}
    best, tied = rank(groups)
    assert [s.settings for s in tied] == ["lru" if best.settings == "pinned" else "pinned"]
    line = ranking_line(groups, str, "fastest here")
    assert line.startswith("fastest here: no clear winner: 2 settings")


def test_a_lead_larger_than_the_spread_is_named():
    groups = {"1 thread": _runs(5.0, 5.05), "2 threads": _runs(9.0, 9.1)}
    best, tied = rank(groups)
    assert best.settings == "2 threads" and tied == []
    assert "more than the run-to-run spread" in ranking_line(groups, str, "fastest here")


def test_one_run_each_uses_the_floor_or_its_token_error():
    # 2 % apart with one run each: inside the 2 % floor of both → tied
    assert rank({"a": _runs(10.0), "b": _runs(10.2)})[1]
    # tokens that vary a lot widen the spread past the floor
    noisy = rank({"a": _runs(10.0, stddev=8.0), "b": _runs(11.0, stddev=8.0)})
    assert noisy[0].spread / noisy[0].mean > NOISE_FLOOR and noisy[1]


def test_sweep_on_a_fitting_model_says_so_first(bundled_model, tmp_path, capsys):
    assert main(["sweep", "--model", bundled_model, "--policy", "pinned,lru", "--budget-mb", "1024",
                 "--tokens", "4", "--quiet"]) == 0
    out = capsys.readouterr()
    err = out.err.splitlines()
    assert err[1].startswith("note: gemma-3-270m-Q4_K_M.gguf (241 MB) fits in the budget (1024 MB)"), err
    fastest = next(line for line in out.out.splitlines() if line.startswith("fastest here"))
    # identical work either way: a tie, or a lead stated as larger than the spread
    assert "no clear winner" in fastest or "more than the run-to-run spread" in fastest


def test_sweep_over_budget_has_no_fits_note(synthetic_model, capsys):
    assert main(["sweep", "--model", synthetic_model, "--budget-mb", "200", "--shard-mb", "64",
                 "--tokens", "2", "--quiet"]) == 0
    assert "fits in the budget" not in capsys.readouterr().err


def test_tune_on_a_fitting_model_says_so_first(bundled_model, capsys):
    assert main(["tune", "--model", bundled_model, "--device", "iphone-16-pro", "--tokens", "3", "--quiet",
                 "--policy", "pinned", "--shard-mb", "64", "--prefetch-depth", "1", "--threads", "1,2",
                 "--ssd-mb-s", "0"]) == 0
    out = capsys.readouterr()
    assert out.err.splitlines()[2].startswith("note: gemma-3-270m-Q4_K_M.gguf (241 MB) fits in the budget")
    assert "best:" in out.out
