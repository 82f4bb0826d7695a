"""Two runs on one model share its eviction (issue 19, finding 4): each run sees the other's
lock on the model file and says so in its output and in its row (evict_mechanism)."""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
import time

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import open_run


def _holds_lock(pid: int) -> bool:
    return any(line.split()[1:2] == ["FLOCK"] and line.split()[4] == str(pid)
               for line in open("/proc/locks").read().splitlines())


def _wait(condition, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.1)


@pytest.fixture
def other_bench(bundled_model, tmp_path):
    """A real second `shardscope bench` on the same model, long enough to overlap ours."""
    child = subprocess.Popen([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--model", bundled_model,
                              "--tokens", "4000", "--threads", "1", "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _holds_lock(child.pid) or child.poll() is not None, 120, "the other run never took its lock")
        assert child.poll() is None, "the other run ended before ours started"
        yield child
    finally:
        child.kill()
        child.wait()


def test_second_run_says_eviction_is_shared_in_output_and_row(bundled_model, other_bench, tmp_path, capsys):
    rows = tmp_path / "r.csv"
    assert main(["bench", "--model", bundled_model, "--tokens", "3", "--threads", "1", "--quiet",
                 "--csv", str(rows)]) == 0
    assert other_bench.poll() is None  # it really ran alongside ours
    err = capsys.readouterr().err
    assert "eviction was shared" in err
    row = next(csv.DictReader(rows.open()))
    assert f"SHARED with pid {other_bench.pid}" in row["evict_mechanism"]


def test_first_run_learns_of_a_run_started_after_it(bundled_model):
    with open_run(RunSettings(model_path=bundled_model, n_gen=3, threads=1, n_ctx=128)) as run:
        assert run.model_lock.others() == []  # alone so far
        later = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import time
            from shardscope.engine.stream.model_lock import ModelLock
            lock = ModelLock({bundled_model!r})
            print("locked", flush=True)
            time.sleep(120)
            """)], stdout=subprocess.PIPE, text=True)
        try:
            assert later.stdout.readline().strip() == "locked"
            summary = run.run()
        finally:
            later.kill()
            later.wait()
    assert f"SHARED with pid {later.pid}" in summary.evict_mechanism


def test_runs_one_after_another_do_not_count_as_shared(bundled_model):
    settings = RunSettings(model_path=bundled_model, n_gen=2, threads=1, n_ctx=128)
    for _ in range(2):  # a sweep: each run closes (and drops its lock) before the next opens
        with open_run(settings) as run:
            summary = run.run()
        assert "SHARED" not in summary.evict_mechanism
    assert not _holds_lock(__import__("os").getpid())
