"""Synthetic MoE models: real GGUFs llama.cpp loads and runs, of the requested shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.cli.cli import main
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.synth.synth import write_synthetic_model
from shardscope.engine.synth.synth_moe import MoeSpec

MIB = 1024 * 1024


def _generate(path: str, n: int = 6) -> list[int]:
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(path, n_threads=2, n_ctx=128) as session:
        return session.generate("The history of the printing press begins", n).tokens


@pytest.mark.parametrize("spec, arch", [
    (MoeSpec(64, 8), "llama"),
    (MoeSpec(16, 2, shared_experts=2, routing_skew=3.0), "qwen2moe"),
])
def test_moe_model_loads_and_generates(tmp_path, spec, arch):
    info = write_synthetic_model(tmp_path / "moe.gguf", 40, moe=spec)
    assert abs(info.size_bytes - 40 * MIB) <= 0.05 * 40 * MIB
    assert (info.n_expert, info.n_expert_used, info.architecture) == (spec.experts, spec.experts_used, arch)
    layout = read_layout(info.path)
    assert layout.architecture == arch
    assert layout.metadata[f"{arch}.expert_count"] == spec.experts
    assert layout.metadata[f"{arch}.expert_used_count"] == spec.experts_used
    moe = read_moe_layout(layout)
    assert moe.n_expert == spec.experts and len(moe.layers) == info.n_layers
    shexp = [t.name for t in layout.tensors if "_shexp" in t.name]
    assert bool(shexp) == bool(spec.shared_experts)
    first, second = _generate(info.path), _generate(info.path)
    assert len(first) == 6 and first == second


def test_skew_scales_router_rows(tmp_path):
    import gguf
    import numpy as np

    flat = write_synthetic_model(tmp_path / "flat.gguf", 24, n_layers=2, moe=MoeSpec(16, 2))
    skewed = write_synthetic_model(tmp_path / "skew.gguf", 24, n_layers=2, moe=MoeSpec(16, 2, routing_skew=3.0))
    norms = []
    for info in (flat, skewed):
        router = next(t for t in gguf.GGUFReader(info.path).tensors if t.name == "blk.0.ffn_gate_inp.weight")
        norms.append(np.linalg.norm(np.asarray(router.data, dtype=np.float64).reshape(16, -1), axis=1))
    # Same seed, same rows: the skew alone scales them, the first hot expert's ×4, the cold ones ×1.
    ratio = norms[1] / norms[0]
    assert ratio[0] == pytest.approx(4.0, rel=0.02)
    assert np.allclose(ratio[2:], 1.0, rtol=0.02)  # max(2, 16 // 8) = 2 hot experts in layer 0


@pytest.mark.parametrize("spec, words", [
    (MoeSpec(1, 1), "experts must be 2 to 1024"),
    (MoeSpec(8, 9), "experts_used must be 1 to experts (8)"),
    (MoeSpec(8, 2, shared_experts=-1), "shared_experts"),
    (MoeSpec(8, 2, routing_skew=float("nan")), "routing_skew"),
])
def test_bad_moe_spec(tmp_path, spec, words):
    with pytest.raises(ShardscopeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        write_synthetic_model(tmp_path / "x.gguf", 24, moe=spec)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, words", [
    (["--experts", "8"], "--experts needs --moe"),
    (["--moe", "--experts", "8", "--experts-used", "9"], "--experts-used must be 1 to --experts (8), got 9"),
    # a value the user did not give is named as the flag's default (qwen3moe uses 8 experts a token)
    (["--moe", "--arch", "qwen3moe", "--experts", "4"], "--experts-used (default) must be 1 to --experts (4)"),
    (["--moe", "--routing-skew", "-1"], "--routing-skew"),
])
def test_cli_refusals(tmp_path, capsys, argv, words):
    out = tmp_path / "m.gguf"
    assert main(["synth", "--size-mb", "24", "--out", str(out), "--quiet", *argv]) == 2 if "-1" not in argv else True
    if "-1" in argv:
        with pytest.raises(SystemExit) as exc:
            main(["synth", "--size-mb", "24", "--out", str(out), "--quiet", *argv])
        assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]
    assert not out.exists()


def test_cli_writes_moe(tmp_path, capsys):
    out = tmp_path / "m.gguf"
    assert main(["synth", "--moe", "--experts", "8", "--experts-used", "2", "--size-mb", "24",
                 "--out", str(out), "--quiet"]) == 0
    assert "8 experts (top-2), arch llama" in capsys.readouterr().out
    assert Path(out).stat().st_size > 20 * MIB
