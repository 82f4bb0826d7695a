"""Bad input to ``shardscope bench``: one clear line, exit code 2 (as the README says), never a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--tokens", "2", *args],
                          capture_output=True, text=True, timeout=300)


def _assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, synthetic_model):
    d = tmp_path_factory.mktemp("bad")
    not_gguf = d / "notes.gguf"
    not_gguf.write_text("hello, I am not a model\n")
    truncated_header = d / "cut-header.gguf"
    truncated_header.write_bytes(open(synthetic_model, "rb").read(200))
    truncated_data = d / "cut-data.gguf"
    shutil.copyfile(synthetic_model, truncated_data)
    with open(truncated_data, "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    return {"not_gguf": not_gguf, "header": truncated_header, "data": truncated_data, "dir": d}


def test_missing_file(tmp_path):
    _assert_one_line_error(_bench("--model", str(tmp_path / "nope.gguf")), "nope.gguf", "no such file")


def test_not_a_gguf(bad_files):
    _assert_one_line_error(_bench("--model", str(bad_files["not_gguf"])), "notes.gguf", "not a GGUF")


def test_truncated_header(bad_files):
    _assert_one_line_error(_bench("--model", str(bad_files["header"])), "cut-header.gguf", "truncated")


def test_truncated_tensor_data(bad_files):
    _assert_one_line_error(_bench("--model", str(bad_files["data"])), "cut-data.gguf", "cut short")


def test_budget_below_minimum(synthetic_model):
    _assert_one_line_error(_bench("--model", synthetic_model, "--budget-mb", "20"), "minimum", "MiB")


@pytest.mark.parametrize("flag", ["--shard-mb", "--threads"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_knobs(flag, value):
    _assert_one_line_error(_bench(flag, value), flag, "must be > 0")
