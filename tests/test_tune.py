"""Auto-tune: coordinate descent on projected device tok/s, cached, fewer runs than the grid."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from conftest import blank_summary
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.profile_file import load_profile
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.search.tune import auto_tune, save_tuned_profile, user_profiles_dir
from shardscope.engine.stream.streaming_run import RunSummary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_summary(settings: RunSettings, projected: float, resident_mb: float = 100.0) -> RunSummary:
    return blank_summary(model_filename="fake.gguf", avg_ts=projected / 2, resident_weights_mb=resident_mb,
                         budget_mb=settings.budget_mb, device="iphone-16-pro", projected_ts=projected,
                         projected_bound="ssd")


CANDIDATES = {"policy": ["pinned", "lru"], "shard_mb": [8, 16, 32, 64, 128], "prefetch_depth": [0, 1, 2, 3, 4],
              "threads": [1, 2]}


def test_descent_finds_a_separable_optimum_with_few_runs_and_no_repeats():
    seen = []

    def measure(s: RunSettings):
        seen.append(s)
        if s.shard_mb == 128 and s.prefetch_depth == 4:
            return None  # refused: below the minimum budget
        score = ((2.0 if s.policy == "pinned" else 1.0) * (1 + 0.1 * [8, 16, 32, 64, 128].index(s.shard_mb))
                 * (1 + 0.05 * (2 - abs(s.prefetch_depth - 2))) * (1.2 if s.threads == 2 else 1.0))
        return _fake_summary(s, score)

    result = auto_tune("iphone-16-pro", candidates=CANDIDATES, budget_cap_mb=300, measure=measure)
    assert len(seen) == len(set(seen))  # the cache: no combination measured twice
    assert result.grid_size == 100
    assert result.runs + result.refused == len(seen)
    assert result.runs < result.grid_size / 3
    best = result.best.settings
    assert (best.policy, best.shard_mb, best.prefetch_depth, best.threads) == ("pinned", 128, 2, 2)
    assert best.budget_mb == 300  # fixed at the cap (below the iPhone's 2048 MB weight budget)


def test_candidates_that_do_not_fit_the_device_are_never_best():
    def measure(s: RunSettings):
        # lru "measures" faster but held more weights than the iPhone's 2048 MB allow.
        if s.policy == "lru":
            return _fake_summary(s, 10.0, resident_mb=3000)
        return _fake_summary(s, 1.0 + s.prefetch_depth / 10)

    result = auto_tune("iphone-16-pro", candidates={**CANDIDATES, "shard_mb": [64]}, measure=measure)
    assert result.best.settings.policy == "pinned"
    assert result.best.fits
    assert result.budget_mb == 2048  # no cap: the device's weight budget
    assert any(not e.fits for e in result.evaluations)


def test_bad_candidates_are_refused():
    with pytest.raises(ShardscopeError, match="cannot tune"):
        auto_tune("iphone-16-pro", candidates={"prompt": ["x"]}, measure=lambda s: None)
    with pytest.raises(ShardscopeError, match="unknown device"):
        auto_tune("nokia-3310", measure=lambda s: None)


def test_tune_on_a_synthetic_model_beats_the_grid_on_runs_and_saves_a_profile(synthetic_model, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("SHARDSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    size_mb = os.path.getsize(synthetic_model) / 2**20
    cap = int(size_mb / 2)  # half the model: streaming decides the speed
    candidates = {"policy": ["pinned", "lru"], "shard_mb": [16, 32, 64], "prefetch_depth": [0, 1, 2],
                  "threads": [1, 2]}
    result = auto_tune("iphone-16-pro", model_path=synthetic_model, candidates=candidates, budget_cap_mb=cap,
                       n_gen=3, ssd_mb_s=0, max_passes=3)
    assert result.grid_size == 36
    assert 1 <= result.runs < result.grid_size
    best = result.best
    assert best is not None and best.fits
    assert best.summary.projected_ts > 0 and math.isfinite(best.summary.projected_ts)
    assert best.summary.device == "iphone-16-pro"
    assert best.settings.budget_mb == cap
    assert best.summary.resident_weights_mb <= result.weight_budget_mb
    # The best measured, or tied with it: no measured candidate's interval lies above the best's.
    assert not any(e.interval is not None and e.interval.above(best.interval) for e in result.evaluations)
    assert all(len(e.rounds) >= 3 for e in result.evaluations if e.interval is not None)  # warm rounds, not one

    path = save_tuned_profile(result, "Tuned test", model_path=synthetic_model)
    assert path == user_profiles_dir() / "tuned-test.toml"
    assert path.parent == tmp_path / "config" / "profiles"
    profile = load_profile(path)
    assert profile.name == "Tuned test" and profile.device == "iphone-16-pro"
    assert best.interval.text() in profile.description and "margin" in profile.description
    s = profile.settings
    assert (s.policy, s.shard_mb, s.prefetch_depth, s.threads, s.budget_mb) == (
        best.settings.policy, best.settings.shard_mb, best.settings.prefetch_depth, best.settings.threads, cap)
    assert s.model_path == synthetic_model


def test_tune_cli_saves_the_profile_and_csv(synthetic_model, tmp_path):
    env = {**os.environ, "SHARDSCOPE_CONFIG_DIR": str(tmp_path / "cfg")}
    out = tmp_path / "tune.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "shardscope.engine.cli.cli", "tune", "--device", "iphone-16-pro", "--model",
         synthetic_model,
         "--budget-cap-mb", "160", "--policy", "pinned", "--shard-mb", "32", "--prefetch-depth", "0-1",
         "--threads", "2", "--ssd-mb-s", "0", "--tokens", "3", "--csv", str(out), "--save-profile", "cli tuned",
         "--quiet"], capture_output=True, text=True, timeout=240, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "coordinate descent" in proc.stdout and "of a 2-combination grid" in proc.stdout
    assert "(2 combinations in the full grid)" in proc.stderr  # the grid it then searches, not the declared lists'
    assert " rounds) tok/s" in proc.stdout  # every candidate with its interval
    assert "best: policy pinned, shard 32 MiB" in proc.stdout
    profile = load_profile(tmp_path / "cfg" / "profiles" / "cli-tuned.toml")
    assert profile.settings.budget_mb == 160
    rows = out.read_text().strip().splitlines()
    assert len(rows) == 1 + 2  # header + one row per run (its round nearest the interval's mean)


def test_tune_cli_refuses_bad_input_in_one_line(tmp_path):
    for args, needle in ((["--device", "nokia-3310"], "unknown device"),
                         (["--shard-mb", "8-2"], "--shard-mb"),
                         (["--tokens", "1"], "--tokens")):
        proc = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "tune", *args], capture_output=True,
                              text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip() and "tune for" not in line
                 and "candidates:" not in line]
        assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_ties_keep_the_start_value_and_a_knob_without_effect_is_not_ranked():
    """Rounds of noise around one figure: no candidate is called best over the start; a clear
    gain still moves. Replayed rounds (the measure returns each candidate's warm rounds)."""
    import random

    rng = random.Random(1)

    def measure(s: RunSettings):
        base = 100.0 * (1.5 if s.threads == 2 else 1.0)  # threads matter; the policy only adds noise
        return [_fake_summary(s, base * (1 + rng.uniform(-0.1, 0.1))) for _ in range(5)]

    cands = {"policy": ["pinned", "lru"], "shard_mb": [64], "prefetch_depth": [2], "threads": [1, 2]}
    result = auto_tune("iphone-16-pro", candidates=cands, budget_cap_mb=300, measure=measure)
    best = result.best
    assert best.settings.threads == 2 and best.settings.policy == "pinned"  # the start's policy kept
    policy = [d for d in result.decisions if d.knob == "policy"][0]
    assert len(policy.choice.ties) == 2 and policy.choice.why.startswith("tie")
    assert [e.settings.policy for e in result.ties()] == ["lru"]
    assert result.margin() > 0.3  # over threads 1


@pytest.fixture(scope="module")
def synthetic_moe_model(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe") / "moe-24mb.gguf"
    write_synthetic_model(path, 24, n_layers=4, seed=2, moe=MoeSpec(experts=8, experts_used=2))
    return str(path)


def test_the_tune_cli_counts_the_grid_it_searches(synthetic_moe_model):
    """Issue 48: "1000 combinations" printed before, "a 100-combination grid" after: one count."""
    proc = subprocess.run(
        [sys.executable, "-m", "shardscope.engine.cli.cli", "tune", "--model", synthetic_moe_model, "--tokens", "2",
         "--budget-cap-mb", "1", "--quiet"],  # every candidate refused before loading: no run
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 1 and "no candidate ran" in proc.stderr, proc.stderr
    from shardscope.engine.runs.run_factory import streams_experts
    from shardscope.engine.search.tune import default_candidates, searched_grid

    experts = streams_experts(RunSettings(model_path=synthetic_moe_model, budget_mb=1))
    grid = math.prod(len(v) for v in searched_grid(default_candidates(), experts, {}).values())
    assert f"({grid} combinations in the full grid)" in proc.stderr, proc.stderr
    assert f"of a {grid}-combination grid" in proc.stdout, proc.stdout
    assert grid < math.prod(len(v) for v in default_candidates().values())


def test_a_read_side_knob_is_said_to_have_no_effect_while_the_device_is_compute_bound():
    """The policy changes only what is read; with prefetch the reads overlap the compute, and
    while the compute is the larger term the policy cannot move the projected figure: its
    candidates' measured noise is not ranked."""
    import random

    from shardscope.engine.devices.run_projection import fill_device_columns, projection_for

    rng = random.Random(3)

    def measure(s: RunSettings):
        out = []
        for _ in range(4):
            r = blank_summary(model_filename="fake.gguf", model_size_mb=200.0, n_threads=s.threads,
                              prefetch_depth=s.prefetch_depth, budget_mb=s.budget_mb, resident_weights_mb=100.0,
                              read_mb_per_token=1.0 if s.policy == "pinned" else 3.0,  # lru reads 3x as much
                              avg_ts=20.0 * (1 + rng.uniform(-0.15, 0.15)), wait_ms_per_token=0.0)
            fill_device_columns(r, "iphone-16-pro", projection_for(r, "iphone-16-pro"))
            out.append(r)
        assert out[0].projected_bound == "compute"
        return out

    cands = {"policy": ["pinned", "lru"], "shard_mb": [64], "prefetch_depth": [2], "threads": [2]}
    result = auto_tune("iphone-16-pro", candidates=cands, budget_cap_mb=300, measure=measure)
    policy = [d for d in result.decisions if d.knob == "policy"][0]
    assert policy.no_effect and not policy.moved and "no effect on the projected figure" in policy.text()
    assert result.no_effect_knobs() == ["policy"] and result.best.settings.policy == "pinned"
