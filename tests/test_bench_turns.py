"""bench/lib/turns.py and RoundStream's pause between rounds: how gui_session_drift's two runs take
turns without a pause landing in a counted round's decode; and bench/lib/drift_goals.py, the line
that holds the session's figures against issue 32's goals."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

from bench.lib.turns import counted, steal_share, turn_seconds

R = namedtuple("R", "n_gen avg_ts")  # what counted() reads of a round


def test_counted_leaves_out_the_load_rounds_outside_the_turns_and_a_round_a_pause_fell_into():
    turns = [(0.0, 10.0, "window"), (10.0, 16.0, "headless"), (16.0, 26.0, "window"), (26.0, 31.0, "headless")]
    ended = [(1.0, R(32, 10.0)),    # the first: its load
             (4.0, R(32, 16.0)),    # 2 s of decode: counted
             (12.0, R(32, 16.0)),   # ended in the other's turn (a heard-late round has 0.5 s)
             (18.0, R(32, 32 / 7.0)),  # 7 s of decode >= the shortest pause (5 s): a pause fell in
             (20.0, R(32, 32 / 4.9)),  # 4.9 s: its own decode, counted
             (26.3, R(32, 16.0))]   # heard 0.3 s after its turn ended: counted
    assert [t for t, _ in counted(ended, turns, "window")] == [4.0, 20.0, 26.3]
    assert counted([], turns, "window") == []


def test_turns_are_four_round_decodes_and_five_seconds_at_least():
    assert turn_seconds([R(32, 16.0)] * 3) == 8.0       # 2 s decodes
    assert turn_seconds([R(32, 100.0)] * 3) == 5.0      # 0.32 s decodes
    assert turn_seconds([]) == 15.0


def test_steal_share_is_the_stolen_ticks_over_all_ticks_in_the_span():
    samples = [(0.0, (100.0, 1000.0)), (30.0, (130.0, 1200.0)), (61.0, (160.0, 1400.0)), (90.0, (400.0, 1600.0))]
    assert steal_share(samples, 0.0, 60.0) == 60.0 / 400.0  # 61 s is within the 2.5 s of slack
    assert steal_share(samples[:1], 0.0, 60.0) != steal_share(samples[:1], 0.0, 60.0)  # NaN: one sample


def test_the_headless_child_stops_itself_between_rounds(bundled_model):
    """Asked to pause, the child stops (the kernel's process state says T) after a round ends and
    before the next one's decode: no round ends while it is stopped, and the first round after a
    3-s pause decodes in less than the pause (one a pause fell into would have it all added)."""
    from bench.lib.headless_child import RoundStream
    from shardscope.engine.knobs.settings import RunSettings

    stream = RoundStream(RunSettings(model_path=bundled_model, budget_mb=400, threads=2, n_gen=8, n_ctx=128))
    try:
        deadline = time.monotonic() + 120
        while len(stream.ended) < 2 and time.monotonic() < deadline and stream.process.poll() is None:
            time.sleep(0.05)
        assert len(stream.ended) >= 2, "the child ran no rounds"
        stream.pause_at_round_end()
        assert stream.paused.wait(60)
        # The kernel's own word, through ps (not psutil, which the stream waits on): T, stopped.
        state = subprocess.run(["ps", "-o", "stat=", "-p", str(stream.pid)], capture_output=True, text=True).stdout
        assert state.strip().startswith("T"), state
        before = len(stream.ended)
        time.sleep(3.0)
        assert len(stream.ended) == before  # stopped: no round ended
        stream.resume()
        while len(stream.ended) < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = stream.ended[before][1]
        assert after.n_gen / after.avg_ts < 3.0  # the pause fell outside its decode
    finally:
        stream.end()


def test_the_goals_line_names_each_goal_its_figure_and_the_host_beside_a_missed_drift():
    from bench.lib.drift_goals import goals_line

    line = goals_line({"first": 0.99, "last": 1.05, "drift": 0.90, "rss": 2.0}, host_drift=0.85)
    assert line.startswith("goals: ")
    assert "window/headless first minute 0.99 (>= 0.9: met)" in line
    assert "window/headless last minute 1.05 (>= 0.9: met)" in line
    assert "window last/first 0.90 (>= 0.95: MISSED; headless 0.85 in the same minutes, " \
           "window/headless last/first 1.06)" in line
    assert "RSS growth % 2.00 (<= 5: met)" in line
    met = goals_line({"first": 0.9, "last": 0.95, "drift": 1.0, "rss": 5.1}, host_drift=1.0)
    assert "window last/first 1.00 (>= 0.95: met)" in met and "headless" not in met.split("last/first 1.00")[1]
    assert "RSS growth % 5.10 (<= 5: MISSED)" in met
    assert "MISSED" in goals_line({"first": float("nan"), "last": 1, "drift": 1, "rss": 0}, 1.0)


def test_run_age_refuses_a_phase_of_no_seconds_in_one_line_before_any_run():
    root = Path(__file__).resolve().parent.parent
    for flag in ("--alone-s", "--turns-s", "--turn-s"):
        out = subprocess.run([sys.executable, "-m", "bench.studies.run_age", flag, "0"], cwd=root,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == f"{flag} 0: must be above 0 seconds"
