"""Every output path, a CSV's columns and the device name are checked before the model loads
(issue 19, finding 3): a bad one costs one line and exit 2, never a finished run."""

from __future__ import annotations

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.runs import bench_command


@pytest.fixture
def no_model_load(monkeypatch):
    """Any run opened fails the test: the refusal must come before a model is touched."""
    def refuse(*a, **kw):
        raise AssertionError("open_run was called: the model would load before the output check")

    monkeypatch.setattr(bench_command, "open_run", refuse)


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("small-moe") / "m.gguf"
    write_synthetic_model(path, 24, n_layers=2, moe=MoeSpec(8, 2))
    return str(path)


def _refused(capsys, argv, *words) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for word in words:
        assert word in err[0], err
    return err[0]


def test_missing_folder_is_refused_before_the_run(bundled_model, no_model_load, capsys):
    _refused(capsys, ["bench", "--model", bundled_model, "--csv", "/nonexistent/x.csv"],
             "--csv /nonexistent/x.csv", "does not exist")
    _refused(capsys, ["bench", "--model", bundled_model, "--timeline", "/nonexistent/t.csv"], "--timeline")


def test_unknown_device_is_refused_before_the_run(bundled_model, no_model_load, capsys):
    _refused(capsys, ["bench", "--model", bundled_model, "--device", "nokia"], "unknown device 'nokia'")


def test_folder_that_takes_no_file_is_refused(bundled_model, no_model_load, capsys, tmp_path):
    # /proc takes no new files, for root too (permission bits would not stop root)
    _refused(capsys, ["bench", "--model", bundled_model, "--csv", "/proc/x.csv"], "--csv /proc/x.csv", "cannot write")
    _refused(capsys, ["bench", "--model", bundled_model, "--csv", str(tmp_path)], "is a folder")
    # A path through a regular file: no folder can be there, for root too.
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file\n")
    _refused(capsys, ["bench", "--model", bundled_model, "--csv", str(blocker / "x.csv")], str(blocker / "x.csv"))
    assert blocker.read_text() == "a file\n"


def test_read_only_folder_is_refused_before_the_run(bundled_model, tmp_path):
    """chmod 0o555, checked in a child that obeys permission bits also as root
    (tests/permission_bits.py): one line, exit 2, nothing written, no model loaded."""
    from permission_bits import require_permission_bits, run_obeying_permissions

    require_permission_bits(tmp_path)  # skips, saying why, where root cannot drop CAP_DAC_OVERRIDE
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        child = run_obeying_permissions(["-m", "shardscope.engine.cli.cli", "bench", "--model", bundled_model,
                                         "--csv", str(locked / "x.csv"), "--tokens", "2"])
    finally:
        locked.chmod(0o755)
    err = child.stderr.strip().splitlines()
    assert child.returncode == 2 and len(err) == 1, child.stdout + child.stderr
    assert f"--csv {locked / 'x.csv'}" in err[0] and "cannot write" in err[0], err[0]
    assert list(locked.iterdir()) == [] and "Traceback" not in child.stderr
    assert child.stdout == ""  # refused before the run: no summary, no row


def test_csv_and_timeline_on_one_file_is_refused(bundled_model, no_model_load, capsys, tmp_path):
    same = tmp_path / "x.csv"
    same.write_text("kept\n")
    _refused(capsys, ["bench", "--model", bundled_model, "--csv", str(same), "--timeline", str(same)],
             "--csv and --timeline", "same file")
    _refused(capsys, ["bench", "--model", bundled_model, "--timeline", bundled_model], "is the model file")
    assert same.read_text() == "kept\n"


def test_csv_with_other_columns_is_refused_untouched(bundled_model, no_model_load, capsys, tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    _refused(capsys, ["bench", "--model", bundled_model, "--csv", str(other)], str(other), "other columns")
    assert other.read_text() == "a,b\n1,2\n"


def test_dense_csv_refuses_an_expert_run_before_loading(small_moe, no_model_load, capsys, tmp_path):
    from shardscope.engine.stream.streaming_run import RunSummary

    dense = tmp_path / "dense.csv"
    dense.write_text(",".join(RunSummary.columns()) + "\n")
    line = _refused(capsys, ["bench", "--model", small_moe, "--budget-mb", "8", "--csv", str(dense)],
                    "expert-streaming run", "add n_expert")
    assert "new file" in line


def test_good_outputs_still_run_and_write(bundled_model, tmp_path, capsys):
    csv, timeline = tmp_path / "r.csv", tmp_path / "t.csv"
    assert main(["bench", "--model", bundled_model, "--tokens", "3", "--quiet", "--csv", str(csv),
                 "--timeline", str(timeline), "--device", "iphone-16-pro"]) == 0
    assert csv.read_text().count("\n") == 2 and timeline.stat().st_size > 0
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []  # no probe left behind
