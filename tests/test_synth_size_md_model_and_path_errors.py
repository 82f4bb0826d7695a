"""Three outputs that said something untrue (issue 48): the size `synth --size-mb` writes, the model
label of the `-o md` table, and the refusal of an output path whose folder is a regular file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.output.llama_bench_format import _md_model
from shardscope.engine.runs.output_checks import check_writable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_synth_size_mb_240_writes_the_nearest_size_it_can(tmp_path):
    """`synth --size-mb 240` (qwen3moe Q4_K_M) wrote 250 MiB, +4.2 %: the default depth's shape
    was kept while a neighbouring depth's is nearer."""
    out = tmp_path / "q3.gguf"
    proc = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "synth", "--moe", "--arch", "qwen3moe",
                           "--quant", "q4_k_m", "--size-mb", "240", "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    size = out.stat().st_size / 2**20
    assert abs(size - 240) / 240 <= 0.025, size  # 235.2 MiB; 250.1 before


def test_the_md_table_names_the_parameter_count_not_llama_cpps_guess_by_layers():
    """llama.cpp calls a 32-layer llama "7B" whatever its width: `sweep` labelled a 1 B model 7B."""
    assert _md_model({"model_type": "llama 7B Q8_0", "model_n_params": 1.1e9}) == "llama 1.10B Q8_0"
    assert _md_model({"model_type": "llama 7B Q8_0", "model_n_params": 6.7e9}) == "llama 7B Q8_0"  # a real 7B
    assert _md_model({"model_type": "llama ?B Q8_0", "model_n_params": 3.1e8}) == "llama 310.00M Q8_0"
    assert _md_model({"model_type": "qwen3moe 30B.A3B Q4_K - Medium", "model_n_params": 2.5e8}) == \
        "qwen3moe 250.00M Q4_K - Medium"


def test_a_path_under_a_regular_file_is_named_as_such(tmp_path):
    plain = tmp_path / "notes.txt"
    plain.write_text("x")
    with pytest.raises(ShardscopeError, match="notes.txt is a file, not a folder") as err:
        check_writable("--csv", str(plain / "out.csv"))
    assert "does not exist" not in str(err.value)
    with pytest.raises(ShardscopeError, match="does not exist"):
        check_writable("--csv", str(tmp_path / "none" / "out.csv"))


def test_the_window_export_under_a_regular_file_says_so(tmp_path):
    from shardscope.app.files.export import export_session

    plain = tmp_path / "session"
    plain.write_text("x")
    with pytest.raises(ShardscopeError, match="is a file, not a folder"):
        export_session(Path(plain) / "run", [], [], lambda p: None)
