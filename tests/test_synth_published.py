"""Header-only GGUFs of the published shapes (engine/synth/synth_published.py): what `size --model` reads.

Checked with the gguf package's reader (not the engine's) and the file system's block count."""

from __future__ import annotations

import os

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.synth.synth_published import write_header


def test_kimi_k3_header_has_the_published_shape_and_no_weights(tmp_path):
    import gguf

    path = write_header("kimi-k3", tmp_path / "k3.gguf")
    st = os.stat(path)
    assert st.st_size > 1.4e12 and st.st_blocks * 512 < 8 * 2**20  # the real length, a header's worth of disk
    reader = gguf.GGUFReader(str(path))
    fields = {f.name: f.contents() for f in reader.fields.values()}
    kv = fields["kimi-k3.attention.head_count_kv"]
    assert len(kv) == 93 and kv.count(0) == 69 and kv.count(1) == 24  # 69 KDA, 24 gated MLA layers
    up = next(t for t in reader.tensors if t.name == "blk.1.ffn_up_exps.weight")
    assert [int(x) for x in up.shape] == [3584, 3072, 896]  # latent width in, expert width out, 896 experts
    moe = read_moe_layout(read_layout(str(path)))
    assert moe.n_expert == 896 and moe.n_expert_used == 16 and len(moe.layers) == 92
    assert moe.unit_bytes(1) == 17_547_264  # one MXFP4 expert, as the notes give it


@pytest.mark.parametrize("arch", ["deepseek4", "qwen35moe"])
def test_size_reads_the_published_header(tmp_path, capsys, arch):
    path = write_header(arch, tmp_path / f"{arch}.gguf")
    assert main(["size", "--gguf", str(path), "--device", "laptop-16gb"]) == 0
    out = capsys.readouterr().out
    assert "per token   touches" in out and "published shape" in out
