"""bench/sweeps/phone_check.py: published phone runs projected from their traces, checked against the published figures.

The published figures (tests/data/published-phone-runs.csv) are BigMoeOnEdge's own measurements on a
OnePlus 15R; the projection never reads them except the calibration run's compute seconds.
Hand arithmetic used below (tests/test_trace_sizing.py adds up the Qwen3 header):
    Qwen3 picks at k=8 = 8 x 137,134,080 B = 1,097,072,640 B = 1046.25 MiB
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

from shardscope.engine.devices.devices import get_device
from shardscope.engine.devices.published_runs import (
    ADDED_COLUMNS,
    COLUMNS,
    OPTIONAL_COLUMNS,
    PUBLISHED_RUNS,
    leave_one_model_out,
    project_runs,
    read_runs,
)

REPO = Path(__file__).resolve().parents[1]


def _phone_check():
    spec = importlib.util.spec_from_file_location("phone_check", REPO / "bench" / "sweeps" / "phone_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def published():
    runs = read_runs(PUBLISHED_RUNS)
    projected, calibrations = project_runs(runs, get_device("oneplus-15r"))
    return runs, projected, calibrations


def test_the_table_holds_all_three_models_with_a_cache_off_run_each(published):
    runs, _, calibrations = published
    assert {r.model for r in runs} == {"Qwen3-30B-A3B", "Gemma-4-26B-A4B", "gpt-oss-120b"}
    assert all(c.run.cache_mib == 0 for c in calibrations.values())
    assert calibrations["Qwen3-30B-A3B"].compute_s == 0.123  # qwen_stream.log: compute 0.123 s/token
    header = PUBLISHED_RUNS.read_text().splitlines()[0]
    assert header == ",".join(COLUMNS + OPTIONAL_COLUMNS)


def test_mib_per_token_within_10_percent_of_every_run_but_the_calibration(published):
    _, projected, _ = published
    checked = [p for p in projected if not p.calibration]
    assert len(checked) == 16  # 20 runs - 3 cache-off compute calibrations - qwen_c2000_l4 (first touch)
    for p in checked:
        assert abs(p.mib_per_token / p.run.mib_per_token - 1) <= 0.10, p.run.source


def test_cache_off_bytes_by_hand_and_flash_from_the_fitted_probe(published):
    _, projected, _ = published
    off = next(p for p in projected if p.calibration and p.run.model == "Qwen3-30B-A3B")
    assert off.mib_per_token == pytest.approx(1_097_072_640 / 2**20)
    # 48 layers, each one batch of 8 experts x 3 slices on 4 lanes; the saturated device time per byte
    # (1 / 2512.6 MiB/s) over the 1046.25 MiB is 0.4164 s, plus per request 34.2 us x 24 x 48 = 0.0394 s,
    # plus each layer's first wait (~0.34 ms x 48 = 0.016 s): ~0.472 s; the phone waited 0.462 s
    assert off.flash_s == pytest.approx(0.472, abs=0.005)
    assert off.run.mib_per_token == 1050.75 and off.run.flash_s == 0.462  # what the phone read and waited


def test_hit_is_replayed_at_the_runs_k(published):
    _, projected, _ = published
    trace_run = next(p for p in projected if p.run.model == "Qwen3-30B-A3B" and p.run.k == 6)
    assert trace_run.hit_note == "replayed"
    assert trace_run.hit == pytest.approx(0.803, abs=0.001)  # platforms-facts: lru 80.3 % at 4000 MiB
    other_k = next(p for p in projected if p.run.model == "Qwen3-30B-A3B" and p.run.cache_mib == 4000 and p.run.k == 8)
    assert other_k.hit_note.startswith("k=8 not in the trace") and other_k.may_be_off > 0


def test_flash_within_20_percent_of_every_run_but_the_calibration(published):
    _, projected, _ = published
    for p in projected:
        if not p.calibration:
            assert abs(p.flash_error()) <= 0.20, p.run.source


def test_serial_and_overlapped_figures_and_where_the_published_one_lies(published):
    _, projected, _ = published
    for p in projected:
        assert p.serial_tok_s == pytest.approx(1 / (p.compute_s + p.flash_s))
        assert p.overlapped_tok_s == pytest.approx(1 / max(p.compute_s, p.flash_s))
        assert p.tok_s == (p.overlapped_tok_s if p.run.engine == "overlap" else p.serial_tok_s)
    # the trace's own run (overlapping, 5.66 tok/s published) lies between its two figures
    ov = next(p for p in projected if run_stem(p) == "qwen" and p.run.k == 6)
    assert ov.serial_tok_s < ov.run.tok_s < ov.overlapped_tok_s and ov.tok_s_error() == 0


def run_stem(p) -> str:
    return Path(p.run.source.split(":")[0]).stem


def test_leave_one_model_out_projects_each_model_from_the_others(published):
    runs, _, calibrations = published
    lomo = leave_one_model_out(runs, get_device("oneplus-15r"))
    assert set(lomo) == set(calibrations)
    for model, rows in lomo.items():
        assert rows and all(p.run.model != model for p in rows)
    # Gemma's cache-off run from Qwen3's compute per byte: 0.123 s / Qwen3's touched bytes x Gemma's
    qwen, gemma = calibrations["Qwen3-30B-A3B"], calibrations["Gemma-4-26B-A4B"]
    g = next(p for p in lomo["Qwen3-30B-A3B"] if p.run is gemma.run)
    assert g.compute_s == pytest.approx(0.123 / qwen.touched_bytes * gemma.touched_bytes)


def test_rows_file_prints_one_line_per_row_and_writes_the_projection_back(tmp_path, capsys):
    rows = tmp_path / "mine.csv"
    rows.write_text(",".join(COLUMNS) + "\n"
                    "Qwen3-30B-A3B,qwen.route.csv,8,3000,,,,,,my phone\n"
                    "gpt-oss-120b,gptoss.route.csv,2,2500,,,1.9,,,my phone\n")
    out_csv = tmp_path / "out.csv"
    assert _phone_check().main(["--rows", str(rows), "--csv", str(out_csv)]) == 0
    out = capsys.readouterr().out
    assert "| Qwen3-30B-A3B | my phone | 8 | 3000 |" in out and "| gpt-oss-120b | my phone | 2 | 2500 |" in out
    assert "from the cache-off run docs/bench-data/2026-07-12/qwen_stream.log" in out  # from the published table
    with open(out_csv, newline="") as fh:
        written = list(csv.DictReader(fh))
    assert list(written[0]) == list(COLUMNS) + list(OPTIONAL_COLUMNS) + list(ADDED_COLUMNS)
    assert [r["cache_mib"] for r in written] == ["3000", "2500"]
    assert all(0 < float(r["projected_hit"]) < 1 for r in written)
    # tok/s from the row's own seconds, worked here (it was bounded from below only: "> 0"): a token
    # waits for compute and flash in turn (serial) or the longer of the two (overlapped), and the
    # projected figure is one of those two
    for r in written:
        flash, compute = float(r["projected_flash_s"]), float(r["projected_compute_s"])
        assert flash > 0 and compute > 0
        serial, overlapped = float(r["projected_serial_tok_s"]), float(r["projected_overlapped_tok_s"])
        assert serial == pytest.approx(1 / (flash + compute), rel=1e-3)
        assert overlapped == pytest.approx(1 / max(flash, compute), rel=1e-3)
        assert float(r["projected_tok_s"]) in (pytest.approx(serial, rel=1e-3), pytest.approx(overlapped, rel=1e-3))
    assert 0 < float(written[0]["projected_mib_per_token"]) < 1046.25  # less than every pick with a cache


@pytest.mark.parametrize("edit, words", [
    (lambda t: t.replace(",flash_s,", ","), "missing column flash_s"),
    (lambda t: t.replace(",8,2000,0.530,", ",8,2000,lots,", 1), "'decode_hit' must be a number, got 'lots'"),
    (lambda t: t.replace("qwen.route.csv,8,2000", "gone.route.csv,8,2000", 1), "trace file 'gone.route.csv' not found"),
])
def test_bad_rows_are_one_line_and_exit_2(edit, words, tmp_path, capsys):
    rows = tmp_path / "bad.csv"
    rows.write_text(edit(PUBLISHED_RUNS.read_text()))
    assert _phone_check().main(["--rows", str(rows)]) == 2
    captured = capsys.readouterr()
    assert words in captured.err and captured.err.count("\n") == 1 and str(rows) in captured.err
    assert captured.out == ""


def test_unwritable_csv_is_refused_before_any_work(tmp_path, capsys):
    assert _phone_check().main(["--csv", str(tmp_path / "no-such-folder" / "out.csv")]) == 2
    captured = capsys.readouterr()
    assert "--csv" in captured.err and "does not exist" in captured.err and captured.out == ""
