"""Ctrl-C in ``shardscope bench`` (issue 19 finding 2, issue 20): exit 130 in every phase (how
soon: bench/goals/stop_latency.py), no row written, the CSV left byte for byte as it was; the progress line.

The bench runs as a real child process with stderr on a pseudo-terminal, as a user's
shell gives it: the progress line says which phase the run is in, and SIGINT is what
the terminal sends on Ctrl-C. A 200 MB model on an emulated 40 MB/s disk, dropped from
the page cache first, makes the load ~5 s and the prompt pass ~3 s; an MoE model of the
same size streams its experts (a prompt pass picks nearly all of them) under 40 MB.
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

import pytest

from conftest import drop_from_page_cache
from shardscope.engine.output.csv_out import run_columns

ARGS = ["--budget-mb", "100", "--shard-mb", "16", "--prefetch-depth", "1", "--ssd-mb-s", "40", "--tokens", "64",
        "--n-ctx", "128", "--threads", "2"]


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model

    path = tmp_path_factory.mktemp("slow-cli") / "slow-200mb.gguf"
    write_synthetic_model(path, 200, n_layers=16, seed=4)
    return str(path)


@pytest.fixture(scope="module")
def slow_moe_model(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("slow-moe") / "slow-moe-200mb.gguf"
    write_synthetic_model(path, 200, n_layers=16, moe=MoeSpec(32, 4), seed=5)
    return str(path)


def bench_on_a_terminal(model: str, csv: str, env: dict, args=ARGS) -> tuple[subprocess.Popen, int]:
    master, slave = pty.openpty()
    # Ctrl-C's default disposition in the child, as on a user's terminal: a suite started in the
    # background (`make test &`) ignores SIGINT, and a child would inherit that and never stop.
    child = subprocess.Popen([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--model", model, *args,
                              "--csv", csv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=slave, env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(slave)
    return child, master


def read_until(master: int, child: subprocess.Popen, wanted: bytes, timeout: float) -> bytes:
    """Terminal output up to the first match of the regular expression ``wanted``."""
    seen = b""
    end = time.monotonic() + timeout
    while not re.search(wanted, seen):
        assert time.monotonic() < end and child.poll() is None, f"never saw {wanted!r}: {seen[-400:]!r}"
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            seen += os.read(master, 65536)
    return seen


@pytest.fixture
def env(tmp_path):
    return {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


# "prompt 100 %" is the prompt pass's last line, drawn once the first token is out: decoding.
# Mid-prompt: any of layers 4-12 (the line is drawn at 10 Hz, a resident layer passes quicker).
MID_PROMPT = rb"layer ([4-9]|1[0-2]) of 16"


@pytest.mark.parametrize("kind, phase, marker", [("dense", "load", b"loading "), ("dense", "prompt", MID_PROMPT),
                                                 ("dense", "decode", b"prompt 100 %"),
                                                 ("moe", "prompt", MID_PROMPT), ("moe", "decode", b"prompt 100 %")])
@pytest.mark.hang_bound
def test_ctrl_c_exits_130_and_writes_no_row(request, tmp_path, env, kind, phase, marker):
    model = request.getfixturevalue("slow_model" if kind == "dense" else "slow_moe_model")
    args = ARGS if kind == "dense" else ["--budget-mb", "40", "--ssd-mb-s", "40", "--tokens", "64", "--n-ctx", "128",
                                         "--threads", "2"]
    csv = tmp_path / "runs.csv"
    before = ",".join(run_columns()) + "\n" + ",".join("x" for _ in run_columns()) + "\n"
    csv.write_text(before)
    drop_from_page_cache(model)
    child, master = bench_on_a_terminal(model, str(csv), env, args)
    try:
        shown = read_until(master, child, marker, timeout=90)
        if phase == "decode":
            time.sleep(0.5)  # well into the tokens (~2.5 s each at 40 MB/s)
        pressed = time.perf_counter()
        child.send_signal(signal.SIGINT)
        rc = child.wait(timeout=30)
        took = time.perf_counter() - pressed
        try:
            while select.select([master], [], [], 0.2)[0]:
                shown += os.read(master, 65536)
        except OSError:  # the child is gone: the terminal is closed
            pass
    finally:
        if child.poll() is None:
            child.kill()
        os.close(master)
    text = shown.decode("utf-8", "replace")
    assert rc == 130, text[-400:]
    # A hang bound (expected < 1 s; a 64-token run here takes minutes): how soon it exits is
    # bench/goals/stop_latency.py's ratio.
    assert took < 10.0, f"Ctrl-C during the {kind} run's {phase} took {took:.2f} s"
    assert "Exception ignored" not in text and "Traceback" not in text and "KeyboardInterrupt" not in text
    assert text.rstrip().endswith("shardscope: interrupted")
    assert csv.read_text() == before  # no row, and the rows already there untouched
    assert not list(tmp_path.glob("*.tmp*"))


def test_no_progress_line_off_a_terminal_or_under_quiet(slow_model, tmp_path, env):
    """stderr to a file (a log): no carriage-return line; on a terminal with --quiet: none either."""
    fast = ["--budget-mb", "100", "--shard-mb", "16", "--tokens", "2", "--n-ctx", "64", "--threads", "2"]
    done = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--model", slow_model, *fast],
                          capture_output=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-400:]
    assert b"\r" not in done.stderr and b"loading" not in done.stderr
    master, slave = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--model", slow_model,
                              *fast, "--quiet"], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    try:
        while child.poll() is None or select.select([master], [], [], 0.2)[0]:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
    finally:
        child.wait(timeout=300)
        os.close(master)
    assert child.returncode == 0
    assert b"loading" not in seen and b"prompt " not in seen
