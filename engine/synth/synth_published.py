"""Header-only GGUFs of the published models' full shapes, for ``shardscope size --model`` (no weights).

Sizing a 1.56 TB Kimi K3 needs its tensor table, not its bytes: ``write_header`` writes the GGUF header,
metadata and tensor infos synth's arch writers give at the published shape (their ``dims`` at the real
widths) and leaves the data section a hole (a sparse file of the real length: no block of weights is
written, the file takes the header's few hundred KB of disk). llama.cpp cannot run it (no
weights, synth's small tokenizer); engine/layout/gguf_layout.py reads it as it reads the real file's
header. Shapes from the models' config.json (Kimi K3 from ../shared/notes/models-2026-facts.md); where a
head is wider than synth's 64, GQA archs keep the projection widths with 64-wide heads (the bytes are
the same), MLA/KDA/deepseek4 writers take the real head dims.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.synth.synth_shapes import Shape


@dataclass(frozen=True)
class PublishedShape(Shape):
    dims: dict = field(default_factory=dict)  # the arch writer's extra widths (its ``dims``)


@dataclass(frozen=True)
class Published:
    like: str
    shape: PublishedShape
    experts: int
    experts_used: int
    shared: int
    n_vocab: int
    quant: str


PUBLISHED: dict[str, Published] = {
    # Kimi K3: 93 layers (69 KDA, 24 gated MLA), n_embd 7168, 96 heads, latent MoE 896 x 3072 at 3584, top-16,
    # 2 shared, dense layer 0 of 33792, MXFP4 experts (17,547,264 bytes each), vocab 163,840
    "kimi-k3": Published("Kimi-K3", PublishedShape(93, 7168, 3072, 96, 1, dims=dict(
        latent=3584, q_lora=1536, kv_lora=512, nope=128, rope=64, v_head=128, kda_head=128, dense_ff=33792,
        res_block=12)), 896, 16, 2, 163840, "mxfp4"),
    # DeepSeek-V4-Flash: 43 layers, n_embd 4096, 64 heads x 512 over one KV head, 256 experts top-6 of 2048 + 1
    # shared, first 3 layers hash-routed, q_lora 1024, o_lora 1024, MXFP4 experts, vocab 129,280
    "deepseek4": Published("DeepSeek-V4-Flash", PublishedShape(43, 4096, 2048, 64, 1, dims=dict(
        head=512, rope=64, q_lora=1024, o_lora=1024)), 256, 6, 1, 129280, "mxfp4"),
    # Qwen3.5-35B-A3B: 40 layers, n_embd 2048, 16 heads x 256 over 2 (as 64 x 64 over 8: the same widths),
    # 256 experts top-8 of 512 + 1 shared of 512, vocab 248,320; Q4_K_M experts, as its common GGUFs
    "qwen35moe": Published("Qwen3.5-35B-A3B", PublishedShape(40, 2048, 512, 64, 8), 256, 8, 1, 248320, "q4_k_m"),
}


def write_header(arch: str, out_path: str | os.PathLike) -> Path:
    """The GGUF header (metadata + tensor infos) of ``arch``'s published shape; no tensor data."""
    import gguf

    from shardscope.engine.synth import synth_moe
    from shardscope.engine.synth.synth import write_common_metadata, write_header
    from shardscope.engine.synth.synth_vocab import build_vocab

    if arch not in PUBLISHED:
        raise ShardscopeError(f"--arch {arch}: no published shape here (have {', '.join(PUBLISHED)})")
    pub = PUBLISHED[arch]
    spec = synth_moe.validate_spec(synth_moe.MoeSpec(pub.experts, pub.experts_used, pub.shared, arch=arch,
                                                     quant=pub.quant, routing="uniform"), str(out_path))
    row = synth_moe.arch_spec(spec)
    writer_module = synth_moe.family_writer(row)
    tensors = writer_module.tensors(pub.shape, spec, row, pub.n_vocab)
    target = Path(out_path)
    writer = gguf.GGUFWriter(target, arch=row.gguf_arch)
    write_common_metadata(writer, pub.shape, build_vocab(), 0, own_shape=True, alignment=synth_moe.alignment(spec),
              file_type=synth_moe.file_type(spec), name=f"{pub.like} (published shape, no weights)")
    synth_moe.add_metadata(writer, pub.shape, spec)
    write_header(writer, tensors)
    # The data section as a hole: the file has the real model's length (a reader checks the tensors end inside
    # it), but no block of it is written, so it takes the header's few hundred KB of disk.
    offset = os.path.getsize(target)
    align = synth_moe.alignment(spec)
    for t in tensors:
        offset = -(-offset // align) * align + t.nbytes
    os.truncate(target, -(-offset // align) * align)
    return target


__all__ = ["PUBLISHED", "Published", "PublishedShape", "write_header"]
