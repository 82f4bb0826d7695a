"""A 5-s SIGSTOP of the run process mid-round (issue 48 item 2): the round is flagged, its
projection stays where the other rounds' are. The stop is real (a child sends STOP and CONT
to the run's process); the run is short (bench/goals/projection_stability.py runs it for minutes)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("stall") / "moe-24.gguf"
    write_synthetic_model(path, 24, n_layers=4, seed=2, moe=MoeSpec(experts=8, experts_used=2))
    return str(path)


def test_a_stopped_round_is_flagged_and_its_projection_unchanged(small_moe, tmp_path):
    rows_path, summary_path = tmp_path / "rounds.jsonl", tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "bench.goals.projection_stability", "--model", small_moe,
                           "--budget-mb", "16", "--tokens", "32", "--seconds", "14", "--warmup-s", "2",
                           "--stop-at", "5", "--stop-s", "5", "--json", str(rows_path),
                           "--summary-json", str(summary_path)],
                          capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    stopped = [r for r in rows if r["sigstop"]]
    assert len(stopped) == 1, proc.stdout
    s = stopped[0]
    # The pause is seen: in a token (its wall time) or between tokens (the round's wall time).
    assert s["flag"] and ("host stalled 5" in s["flag"] or "paused 5" in s["flag"]), s
    later = [r for r in rows if r["t"] > s["t"]]
    assert later and later[0]["t"] - s["t"] < 5  # the next round ends soon after: the pause was in this one
    counted = [r["projected_ts"] for r in rows if not r["flag"] and not r["warming"]]
    assert len(counted) >= 3
    median = statistics.median(counted)
    assert abs(s["projected_ts"] - median) / median < 0.35, (s, median)
