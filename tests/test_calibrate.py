"""`shardscope calibrate`: a device's speed fitted from llama-bench rows measured on it.

The end-to-end test stands a 1-thread run in for a slower device and calibrates it
against a 2-thread run of the same model, both written by `shardscope bench -o jsonl`.
The fitted per-core scale is checked against the ratio llama.cpp's own perf counters
measured in the same runs (``llama_eval_ms_per_token``: t_eval_ms / n_eval), which the
fit never reads: it uses the decode times of ``samples_ts``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _cli(*args: str, config: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SHARDSCOPE_CONFIG_DIR": str(config), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env=env)


@pytest.fixture(scope="module")
def result_files(bundled_model, tmp_path_factory):
    """(device rows at 1 thread, this machine's rows at 2 threads): the whole model resident."""
    d = tmp_path_factory.mktemp("calibrate")
    files = {}
    for name, threads in (("device", "1"), ("host", "2")):
        proc = _cli("bench", "--model", bundled_model, "--threads", threads, "--tokens", "8", "-r", "3",
                    "-o", "jsonl", "--quiet", config=d / "unused")
        assert proc.returncode == 0, proc.stderr
        files[name] = d / f"{name}.jsonl"
        files[name].write_text(proc.stdout)
    return files


def test_fitted_scale_matches_the_measured_ratio(result_files, tmp_path):
    config = tmp_path / "config"
    proc = _cli("calibrate", "--device", "iphone-16-pro", str(result_files["device"]),
                "--reference", str(result_files["host"]), config=config)
    assert proc.returncode == 0, proc.stderr
    device_row = json.loads(result_files["device"].read_text())
    host_row = json.loads(result_files["host"].read_text())
    # llama.cpp's perf counters: ms per decoded token, 1 thread on the "device", 2 here.
    measured = (1000 / device_row["llama_eval_ms_per_token"] / 1) / (1000 / host_row["llama_eval_ms_per_token"] / 2)
    saved = config / "devices" / "iphone-16-pro.toml"
    assert saved.exists(), proc.stdout
    from shardscope.engine.base.toml_file import read_toml

    stored = read_toml(saved, "device calibration file")
    scale = stored["compute_scale"]["value"]
    assert scale == pytest.approx(measured, rel=0.10), (scale, measured)
    assert stored["compute_scale"]["calibrated_from"] == str(result_files["device"].resolve())
    assert stored["compute_scale"]["calibrated_on"].count("-") == 2
    # 1 thread < the iPhone's 2 performance cores: the rows cannot say the DRAM bandwidth.
    assert "dram_mb_s" not in stored and "not fitted" in proc.stdout

    # The device now projects with the calibrated number, and says where it came from.
    from shardscope.engine.devices.devices import get_device
    from shardscope.engine.devices.projection import inputs_provenance

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHARDSCOPE_CONFIG_DIR", str(config))
        device = get_device("iphone-16-pro")
        assert device.compute_scale == pytest.approx(scale)
        assert device.is_verified("compute_scale")
        text = inputs_provenance(device)
        assert f"per-core speed calibrated from {result_files['device'].name} on" in text
        assert "per-core speed unverified" not in text
        mp.setenv("SHARDSCOPE_CONFIG_DIR", str(tmp_path / "no-calibration"))
        assert "per-core speed unverified" in inputs_provenance(get_device("iphone-16-pro"))


@pytest.mark.parametrize("content, needle", [
    ('{"model": "x", "t/s": 3}\n', "not llama-bench rows: row 1 has no model_type"),  # wrong schema
    ("not a result at all\n", "not llama-bench rows"),  # neither JSON nor a CSV with rows
    ("", "empty file"),
])
def test_bad_files_get_one_line_and_nothing_is_written(tmp_path, content, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    config = tmp_path / "config"
    proc = _cli("calibrate", "--device", "iphone-16-pro", str(bad), "--reference", str(bad), config=config)
    _assert_refused(proc, config, needle, str(bad))


def test_no_tg_rows_and_unknown_model_are_refused(result_files, tmp_path):
    rows = json.loads(result_files["device"].read_text())
    pp_only = tmp_path / "pp.jsonl"
    pp_only.write_text(json.dumps({**rows, "n_prompt": 512, "n_gen": 0}) + "\n")
    config = tmp_path / "config"
    proc = _cli("calibrate", "--device", "iphone-16-pro", str(pp_only), "--reference", str(result_files["host"]),
                config=config)
    _assert_refused(proc, config, "no text-generation (tg) rows", str(pp_only))

    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({**rows, "model_type": "llama 7B Q4_0", "model_size": 3_825_065_984,
                                 "model_n_params": 6_738_415_616}) + "\n")
    proc = _cli("calibrate", "--device", "iphone-16-pro", str(other), "--reference", str(result_files["host"]),
                config=config)
    _assert_refused(proc, config, "'llama 7B Q4_0'", str(other))
    # Without --reference the model must be the bundled one, which it measures here.
    proc = _cli("calibrate", "--device", "iphone-16-pro", str(other), config=config)
    _assert_refused(proc, config, "not the bundled", str(other))


def _assert_refused(proc, config: Path, *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (config / "devices").exists() or not any((config / "devices").iterdir())


# ------------------------------------------------------------ the rule itself
def test_fit_rule_on_known_numbers():
    from shardscope.engine.devices.calibrate import Observation, fit

    model = ("m", 100 * 10**6, 1)
    host = [Observation("tg", 20.0, 2, model)]  # 10 tok/s per core here
    device = [Observation("tg", r, 4, model) for r in (8.0, 8.0, 12.0)]  # 4 threads, 2 of them P-cores
    f = fit(device, host, performance_cores=2)
    per_core = 3 / (1 / 4 + 1 / 4 + 1 / 6)  # harmonic mean of 4, 4, 6 tok/s per core
    assert f.compute_scale == pytest.approx(per_core / 10)
    assert f.basis == "tg"
    assert f.dram_mb_s == pytest.approx(100 * 3 / (1 / 8 + 1 / 8 + 1 / 12)), "model MB x tg rate, ≥ 2 threads"
    # leave one out: 12 predicted from 8, 8 (-33 %); each 8 from harmonic(8, 12) = 9.6 (+20 %)
    assert f.held_out_error_pct == pytest.approx(20.0)


def test_pp_rows_set_the_scale_when_both_sides_have_them():
    from shardscope.engine.devices.calibrate import Observation, fit

    model = ("m", 10, 1)
    host = [Observation("pp", 400.0, 2, model), Observation("tg", 20.0, 2, model)]
    device = [Observation("pp", 100.0, 2, model), Observation("tg", 10.0, 2, model)]
    f = fit(device, host, performance_cores=2)
    assert f.basis == "pp" and f.compute_scale == pytest.approx(0.25)
    assert math.isnan(f.held_out_error_pct)  # one tg observation: nothing to hold out


def test_csv_results_read_like_jsonl(result_files, tmp_path):
    """llama-bench's CSV has no samples: each row is one observation at its avg_ts."""
    from shardscope.engine.devices.calibrate import observations, read_rows
    from shardscope.engine.output.llama_bench_format import render

    row = json.loads(result_files["device"].read_text())
    as_csv = tmp_path / "device.csv"
    as_csv.write_text(render([{k: (math.nan if v is None else v) for k, v in row.items()}], "csv"))
    (obs,) = observations(read_rows(as_csv), str(as_csv))
    assert obs.kind == "tg" and obs.threads == 1 and obs.rate == pytest.approx(row["avg_ts"], rel=1e-5)
    assert obs.model == (row["model_type"], row["model_size"], row["model_n_params"])
