"""The first Run shows streaming: the demo profile, and the rule that picks it on first start."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardscope.app.base.first_start import FALLBACK_PROFILE, FIRST_START_PROFILE, PROJECTION_DEVICE, startup_profile

BUILTINS = ["Desktop, unconstrained", "iPhone 16 Pro, tuned", "Streaming demo"]


def test_first_start_loads_the_streaming_demo():
    assert startup_profile(None, None, BUILTINS) == FIRST_START_PROFILE
    assert startup_profile(None, "", BUILTINS) == FIRST_START_PROFILE


def test_later_starts_keep_the_users_choice():
    assert startup_profile(None, "Desktop, unconstrained", BUILTINS) == "Desktop, unconstrained"
    assert startup_profile("iPhone 16 Pro, tuned", "Desktop, unconstrained", BUILTINS) == "iPhone 16 Pro, tuned"
    assert startup_profile(None, "deleted one", BUILTINS) == FALLBACK_PROFILE
    assert startup_profile(None, None, ["iPhone 16 Pro, tuned"]) == FALLBACK_PROFILE
    # The iPhone profile's old name (its file was iphone-16-pro.toml, as the device preset's is) opens it.
    assert startup_profile(None, "iPhone 16 Pro", BUILTINS) == "iPhone 16 Pro, tuned" == FALLBACK_PROFILE
    assert startup_profile(None, None, []) is None


def test_demo_profile_streams_the_bundled_model_and_projects_on_the_iphone(bundled_model):
    """Budget below the model's weights, above the engine's minimum; the device stays the iPhone."""
    from shardscope.engine.base.units import MIB
    from shardscope.engine.knobs.profile_file import builtin_profiles_dir, load_profile
    from shardscope.engine.layout.layout_cache import load_layout
    from shardscope.engine.layout.shard_plan import plan_shards
    from shardscope.engine.stream.residency import require_budget

    profile = load_profile(builtin_profiles_dir() / "streaming-demo.toml")
    assert profile.name == FIRST_START_PROFILE and profile.device == PROJECTION_DEVICE
    s = profile.settings
    assert s.model_path is None  # the bundled model
    plan = plan_shards(load_layout(bundled_model), s.shard_mb)
    assert s.budget_mb * MIB < plan.host_bytes  # weights must stream
    require_budget(plan, s.budget_mb, s.prefetch_depth)  # and the engine accepts the budget
    assert len(plan.shards) >= 10  # small shards: the shard map moves


def test_demo_streams_headless(bundled_model):
    """The profile's values through a real run: SSD reads, a hit rate neither 0 nor 100 %."""
    from shardscope.engine.knobs.profile_file import builtin_profiles_dir, load_profile
    from shardscope.engine.stream.streaming_run import StreamingRun

    settings = load_profile(builtin_profiles_dir() / "streaming-demo.toml").settings
    with StreamingRun(settings.with_changes(model_path=bundled_model, n_gen=6, n_ctx=128)) as run:
        summary = run.run()
    assert summary.streamed_mb_per_token > 0  # the controller loaded shards for every token
    rate = summary.cache_hit_rate
    assert not math.isnan(rate) and 0 < rate < 1


def test_help_names_the_window():
    proc = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0
    assert "shardscope gui [MODEL.gguf]" in proc.stdout and "workbench window" in proc.stdout


def test_make_says_what_it_does_while_llama_cpp_compiles(tmp_path):
    """Dry run against a venv that does not exist: the install step announces the wait."""
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.run(["make", "-n", "run", f"VENV={tmp_path / 'venv'}"], cwd=repo, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "expect about 12 minutes" in proc.stdout  # the time measured on a fresh clone
    assert "--quiet" not in proc.stdout and "--progress-bar on" in proc.stdout
