"""Expert-aware layout: units and dense ranges, and the refusals that spare llama.cpp an abort."""

from __future__ import annotations

import numpy as np
import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.layout.gguf_layout import ModelLayout, TensorInfo, read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout

Q8_0, F32 = 8, 0


def _layout(meta: dict, tensors: list[TensorInfo], arch: str = "llama") -> ModelLayout:
    return ModelLayout(path="/models/m.gguf", file_size=1 << 40, mtime_ns=0, version=3, alignment=4096,
                       data_offset=4096, tensors=tuple(tensors), metadata={"general.architecture": arch, **meta})


def _moe_tensors(n_layers=2, n_expert=4, n_embd=64, n_ff=128, prefix_shared=False):
    out, offset = [], 4096

    def add(name, ggml_type, shape, n_bytes):
        nonlocal offset
        out.append(TensorInfo(name, ggml_type, shape, offset, n_bytes))
        offset += -(-n_bytes // 4096) * 4096

    q8 = lambda rows, cols: rows * cols // 32 * 34  # noqa: E731
    add("token_embd.weight", Q8_0, (n_embd, 100), q8(100, n_embd))
    for i in range(n_layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", F32, (n_embd,), 4 * n_embd)
        add(p + "attn_q.weight", Q8_0, (n_embd, n_embd), q8(n_embd, n_embd))
        add(p + "ffn_gate_inp.weight", F32, (n_embd, n_expert), 4 * n_embd * n_expert)
        if prefix_shared:
            add(p + "ffn_up_shexp.weight", Q8_0, (n_embd, n_ff), q8(n_ff, n_embd))
        add(p + "ffn_gate_exps.weight", Q8_0, (n_embd, n_ff, n_expert), n_expert * q8(n_ff, n_embd))
        add(p + "ffn_up_exps.weight", Q8_0, (n_embd, n_ff, n_expert), n_expert * q8(n_ff, n_embd))
        add(p + "ffn_down_exps.weight", Q8_0, (n_ff, n_embd, n_expert), n_expert * q8(n_embd, n_ff))
    add("output.weight", Q8_0, (n_embd, 100), q8(100, n_embd))
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2moe", "qwen3moe", "olmoe", "granitemoe", "deepseek2"])
def test_units_and_dense_ranges(arch):
    tensors = _moe_tensors(prefix_shared=arch in ("qwen2moe", "deepseek2"))
    meta = {f"{arch}.expert_count": 4, f"{arch}.expert_used_count": 2}
    if arch == "deepseek2":  # without it llama.cpp aborts: refused (test_deepseek2_without_rope_dims_is_refused)
        meta["deepseek2.rope.dimension_count"] = 64
    moe = read_moe_layout(_layout(meta, tensors, arch))
    assert (moe.n_expert, moe.n_expert_used, moe.layers) == (4, 2, (0, 1))
    by_name = {t.name: t for t in tensors}
    up = by_name["blk.1.ffn_up_exps.weight"]
    ranges = moe.unit_ranges(1, 3)
    assert len(ranges) == 3
    assert (up.offset + 3 * up.n_bytes // 4, up.offset + up.n_bytes) in ranges
    layer_1_experts = sum(t.n_bytes for t in tensors if t.name.startswith("blk.1.") and "_exps" in t.name)
    assert moe.unit_bytes(1) == layer_1_experts // 4
    # every byte is either dense or exactly one expert's
    assert moe.dense_bytes + moe.expert_bytes == sum(t.n_bytes for t in tensors)
    dense_names = {t.name for t in tensors if (t.offset, t.offset + t.n_bytes) in moe.dense_ranges}
    assert "blk.0.ffn_gate_inp.weight" in dense_names and "token_embd.weight" in dense_names
    assert not any("_exps" in n for n in dense_names)
    if arch in ("qwen2moe", "deepseek2"):
        assert "blk.0.ffn_up_shexp.weight" in dense_names  # shared experts are dense


@pytest.mark.parametrize("rope, words", [(None, ["rope.dimension_count is missing", "abort"]),
                                         (63, ["rope.dimension_count is 63", "even"])])
def test_deepseek2_without_rope_dims_is_refused(rope, words):
    meta = {"deepseek2.expert_count": 4, "deepseek2.expert_used_count": 2}
    if rope is not None:
        meta["deepseek2.rope.dimension_count"] = rope
    with pytest.raises(ShardscopeError) as err:
        read_moe_layout(_layout(meta, _moe_tensors(prefix_shared=True), "deepseek2"))
    message = str(err.value)
    assert message.startswith("/models/m.gguf: deepseek2.") and "\n" not in message
    assert all(word in message for word in words)


def test_dense_model_is_not_moe():
    tensors = [t for t in _moe_tensors() if "_exps" not in t.name and "gate_inp" not in t.name]
    assert read_moe_layout(_layout({}, tensors)) is None


@pytest.mark.parametrize("meta, words", [
    ({"llama.expert_used_count": 2}, ["llama.expert_count", "missing", "abort"]),
    ({"llama.expert_count": 4}, ["llama.expert_used_count", "missing"]),
    ({"llama.expert_count": 4, "llama.expert_used_count": 5}, ["expert_used_count is 5", "1 to"]),
    ({"llama.expert_count": 4, "llama.expert_used_count": 0}, ["expert_used_count is 0"]),
    ({"llama.expert_count": 3, "llama.expert_used_count": 2}, ["does not divide", "expert_count = 3"]),
    ({"llama.expert_count": 2000, "llama.expert_used_count": 2}, ["expert_count is 2000", "1024"]),
])
def test_refusals_name_file_and_key(meta, words):
    with pytest.raises(ShardscopeError) as err:
        read_moe_layout(_layout(meta, _moe_tensors()))
    message = str(err.value)
    assert message.startswith("/models/m.gguf: ") and "\n" not in message
    for word in words:
        assert word in message


def test_expert_bytes_not_divisible_by_count():
    tensors = _moe_tensors()
    bad = [TensorInfo(t.name, t.ggml_type, t.shape, t.offset, t.n_bytes - 34) if t.name == "blk.0.ffn_up_exps.weight"
           else t for t in tensors]
    with pytest.raises(ShardscopeError, match="blk.0.ffn_up_exps.weight .* does not divide"):
        read_moe_layout(_layout({"llama.expert_count": 4, "llama.expert_used_count": 2}, bad))


def test_expert_count_without_expert_tensors():
    tensors = [t for t in _moe_tensors() if "_exps" not in t.name]
    with pytest.raises(ShardscopeError, match="expert_count is 4 but the file has no"):
        read_moe_layout(_layout({"llama.expert_count": 4, "llama.expert_used_count": 2}, tensors))


def test_truncated_expert_tensor_is_refused(tmp_path):
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    info = write_synthetic_model(tmp_path / "moe.gguf", 24, n_layers=2, moe=MoeSpec(8, 2))
    layout = read_layout(info.path)
    last = max((t for t in layout.tensors if "_exps" in t.name), key=lambda t: t.offset)
    cut = tmp_path / "cut.gguf"
    with open(info.path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read(last.offset + last.n_bytes // 2))
    with pytest.raises(ShardscopeError) as err:
        read_moe_layout(read_layout(cut))
    assert str(cut) in str(err.value) and last.name in str(err.value) and "cut short" in str(err.value)


def test_synthetic_moe_layout_matches_file(tmp_path):
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    info = write_synthetic_model(tmp_path / "moe.gguf", 24, n_layers=2, moe=MoeSpec(8, 2))
    moe = read_moe_layout(read_layout(info.path))
    assert (moe.n_expert, moe.n_expert_used, moe.layers) == (8, 2, (0, 1))
    # one expert's slices are whole pages: loading/evicting one never touches a neighbour
    for layer in moe.layers:
        for expert in (0, 7):
            assert all(lo % 4096 == 0 and hi % 4096 == 0 for lo, hi in moe.unit_ranges(layer, expert))
    data = np.fromfile(info.path, dtype=np.uint8)
    assert moe.expert_bytes > 0.8 * data.size
