"""The knob registry: one declaration per knob drives validation, flags, sweeps, profiles
and controls; StreamingRun.apply answers live / restart or refuses, changing nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.cli.cli import build_parser
from shardscope.engine.knobs.knob_ranges import parse_knob
from shardscope.engine.knobs.knobs import ENABLED, KNOBS, LIVE, SWEPT, RunSettings, describe
from shardscope.engine.knobs.profile_file import SETTINGS_KEYS
from shardscope.engine.knobs.settings import RANGES, validate
from shardscope.engine.stream.streaming_run import StreamingRun

MOE = ("expert_cache_mb", "expert_policy", "expert_speculation")


def test_every_field_is_a_declared_knob_and_every_range_comes_from_it():
    assert list(KNOBS) == list(RunSettings.__dataclass_fields__)
    assert all(RANGES[k] == (KNOBS[k].low, KNOBS[k].high) for k in RANGES)
    assert set(LIVE) == {"budget_mb", "prefetch_depth", "policy", "ssd_mb_s", "threads",
                         "expert_cache_mb", "expert_policy", "expert_speculation", "trunk_share"}
    assert SWEPT == ("shard_mb", "prefetch_depth", "threads", "n_gpu_layers", "budget_mb", "policy", "ssd_mb_s",
                     "expert_cache_mb", "expert_policy", "expert_speculation", "trunk_share")


def test_moe_knobs_are_flags_and_profile_keys():
    s = RunSettings()
    assert (s.expert_cache_mb, s.expert_policy, s.expert_speculation) == (0, "auto", False)
    assert all(k in ENABLED and k in SETTINGS_KEYS for k in MOE)
    with pytest.raises(ShardscopeError, match="'expert_policy' must be one of auto, decay, lru, lfu, hot"):
        validate(s.with_changes(expert_policy="fifo"))
    with pytest.raises(ShardscopeError, match="'expert_cache_mb' = -1 is out of range"):
        validate(s.with_changes(expert_cache_mb=-1))
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    flags = {opt for action in bench._actions for opt in action.option_strings}
    assert {"--prefetch-depth", "--expert-cache-mb", "--expert-policy", "--expert-speculation"} <= flags


def test_describe_reads_settings_and_summaries_alike():
    s = RunSettings(shard_mb=32, ssd_mb_s=0.0)
    assert describe(s, ("shard_mb", "prefetch_depth", "ssd_mb_s")) == "shard 32 MiB, depth 2, SSD off"
    assert parse_knob("--policy", "lru,pinned", "policy") == ["lru", "pinned"]


def test_bench_flags_come_from_the_registry():
    proc = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--policy", "fifo"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--policy" in proc.stderr and "pinned" in proc.stderr


def test_apply_answers_live_or_restart_and_refuses_changing_nothing(bundled_model):
    base = RunSettings(model_path=bundled_model, budget_mb=4096, n_gen=2, n_ctx=128)
    run = StreamingRun(base)  # planned, not loaded: apply works on the plan alone
    try:
        assert run.apply(base.with_changes(budget_mb=2048, prefetch_depth=1, threads=1)) == "live"
        assert (run.settings.budget_mb, run.settings.prefetch_depth, run.settings.threads) == (2048, 1, 1)
        live = run.settings
        assert run.apply(live.with_changes(shard_mb=16)) == "restart"
        assert run.settings == live  # a restart is the caller's to start
        with pytest.raises(ShardscopeError, match="below the minimum"):
            run.apply(live.with_changes(budget_mb=16, threads=2))
        with pytest.raises(ShardscopeError, match="'threads'"):
            run.apply(live.with_changes(threads=0))
        assert run.settings == live
    finally:
        run.close()


def test_expert_knobs_take_sweep_and_tune_lists():
    from shardscope.engine.knobs.knob_ranges import format_values, parse_knob
    from shardscope.engine.search.tune import DEFAULT_CANDIDATES, searched_candidates

    assert parse_knob("--expert-speculation", "off,on", "expert_speculation") == [False, True]
    assert parse_knob("--expert-policy", "lru,hot", "expert_policy") == ["lru", "hot"]
    assert parse_knob("--expert-cache-mb", "50-100+50", "expert_cache_mb") == [50, 100]
    assert format_values([False, True]) == "off,on"
    with pytest.raises(ShardscopeError, match="--expert-speculation: unknown value 'maybe'"):
        parse_knob("--expert-speculation", "maybe", "expert_speculation")
    # A dense model's tune does not spend runs on expert knobs, an expert run's not on shard knobs.
    dense = searched_candidates(DEFAULT_CANDIDATES, experts=False, given={})
    assert dense["expert_policy"] == ["auto"] and dense["expert_speculation"] == [False]
    assert dense["shard_mb"] == DEFAULT_CANDIDATES["shard_mb"]
    moe = searched_candidates(DEFAULT_CANDIDATES, experts=True, given={"shard_mb": [16, 32]})
    assert moe["expert_policy"] == ["auto", "decay", "lru", "lfu", "hot"] and moe["prefetch_depth"] == [0]
    assert moe["shard_mb"] == DEFAULT_CANDIDATES["shard_mb"]  # given lists are the caller's business
