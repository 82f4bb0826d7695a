"""Writes synthetic llama-architecture GGUF models of a chosen size.

Streaming only shows up when a model is larger than the memory budget, and tests and
benchmarks need such models without downloading any. This module writes a *real* GGUF
(arch "llama", Q8_0 matrices, F32 norms, the small vocabulary of ``synth_vocab``) that
llama.cpp loads and decodes; the weights are random, so the text is gibberish, but the
compute and the I/O per token are those of a real model of that size.

Layout, for the shard planner: every tensor starts on a 4096-byte boundary
(``general.alignment`` = 4096) and the file order is

    token_embd.weight
    blk.0.attn_norm.weight, blk.0.attn_q.weight, blk.0.attn_k.weight,
    blk.0.attn_v.weight, blk.0.attn_output.weight, blk.0.ffn_norm.weight,
    blk.0.ffn_gate.weight, blk.0.ffn_up.weight, blk.0.ffn_down.weight
    blk.1.* ... blk.{n_layers-1}.*   (numeric order, each layer one contiguous range)
    output_norm.weight, output.weight

Each layer's range begins with its (small) ``attn_norm``, the first tensor llama.cpp
reads in that layer. Nearly all bytes are in ``blk.N.*``; ``token_embd`` and the
separate (untied) ``output`` are a few MB at most.

Memory stays bounded: tensor data is generated and written a chunk (≤ 8 MiB) at a
time, never the whole model. The file is written to ``<out>.partial``, fsynced, then
renamed over ``out``; on any failure the partial file is removed.
"""

from __future__ import annotations

import math
import numbers
import os
import shutil
from pathlib import Path
from typing import BinaryIO, Callable

import numpy as np

from shardscope.engine.base import memory_calls
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import is_finite_number
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.synth.synth_quant import random_blocks
from shardscope.engine.synth.synth_shapes import (
    ALIGNMENT,
    CHUNK_BYTES,
    CONTEXT_LENGTH,
    FILE_TYPE_MOSTLY_Q8_0,
    HEAD_DIM,
    MAX_LAYERS,
    MIB,
    MIN_SIZE_MB,
    Q8_BLOCK,
    Q8_BYTES,
    RMS_EPS,
    ROPE_FREQ_BASE,
    SIZE_TOLERANCE,
    Shape,
    SynthInfo,
    Tensor,
    attention_tensors,
    edge_tensors,
    global_bytes,
    header_bytes,
    kv_heads_for,
    layer_bytes,
)
from shardscope.engine.synth.synth_vocab import SynthVocab, build_vocab


def default_n_layers(size_mb: float) -> int:
    """Layers of about sqrt(size) MB: 8 MB layers at 64 MB, 16 at 256 MB, 32 at 1 GB."""
    return int(min(64, max(2, round(math.sqrt(size_mb)))))


def _plan(size_mb: float, n_layers: int, vocab: SynthVocab, where: str) -> Shape:
    target = int(size_mb * MIB)
    fixed = header_bytes(n_layers, vocab)
    # Per-layer bytes for n_ff = 2.75 n_embd and n_embd_kv = n_embd / 4, per n_embd².
    per_e2 = (Q8_BYTES / Q8_BLOCK) * (2 + 2 * 0.25 + 3 * 2.75)
    n_embd = 0
    for _ in range(3):  # the globals depend on n_embd: settle it
        layer_budget = (target - fixed - global_bytes(max(n_embd, 64), vocab.n_vocab)) / n_layers
        e0 = math.sqrt(max(layer_budget, 1.0) / per_e2)
        step = 256 if e0 >= 1024 else 128 if e0 >= 256 else 64  # n_head divisible by 4, 2, 1
        n_embd = max(64, int(round(e0 / step)) * step)

    best: Shape | None = None
    while True:
        n_head = n_embd // HEAD_DIM
        n_head_kv = kv_heads_for(n_head)
        kv = n_head_kv * HEAD_DIM
        layer_budget = (target - fixed - global_bytes(n_embd, vocab.n_vocab)) / n_layers
        per_ff = 3 * n_embd * Q8_BYTES / Q8_BLOCK
        f_lin = (layer_budget - layer_bytes(n_embd, 0, kv)) / per_ff
        f0 = int(round(f_lin / 32)) * 32
        candidates = [f for f in range(f0 - 96, f0 + 97, 32) if f >= 32]
        if not candidates:
            candidates = [32]
        n_ff = min(candidates, key=lambda f: abs(
            fixed + global_bytes(n_embd, vocab.n_vocab) + n_layers * layer_bytes(n_embd, f, kv) - target))
        best = Shape(n_layers, n_embd, n_ff, n_head, n_head_kv)
        if n_ff >= n_embd or n_embd <= 64:
            break
        n_embd -= 64  # FFN thinner than the embedding: narrow it

    total = fixed + global_bytes(best.n_embd, vocab.n_vocab) + n_layers * layer_bytes(
        best.n_embd, best.n_ff, best.n_embd_kv)
    if abs(total - target) > SIZE_TOLERANCE * target:
        smallest = (fixed + global_bytes(64, vocab.n_vocab) + n_layers * layer_bytes(64, 32, 64)) / MIB
        raise ShardscopeError(
            f"{where}: cannot make a {size_mb:g} MB model with {plural(n_layers, 'layer')} "
            f"(that many layers need at least {smallest:.1f} MB); ask for fewer layers or a larger size")
    return best


def _tensors(shape: Shape, n_vocab: int) -> list[Tensor]:
    e, f, kv, n = shape.n_embd, shape.n_ff, shape.n_embd_kv, shape.n_layers
    s_e, s_f = 1.0 / math.sqrt(e), 1.0 / math.sqrt(f)
    s_res = 1.0 / math.sqrt(2.0 * n)
    head, tail = edge_tensors(n_vocab, e)
    out = list(head)
    for i in range(n):
        p = f"blk.{i}."
        out += attention_tensors(p, e, kv, n) + [
            Tensor(p + "ffn_gate.weight", f, e, True, s_e),
            Tensor(p + "ffn_up.weight", f, e, True, s_e),
            Tensor(p + "ffn_down.weight", e, f, True, 2.0 * s_f * s_res),
        ]
    return out + tail


def _q8_0(weights: np.ndarray) -> bytes:
    """Q8_0 blocks of a float matrix: per 32 weights an f16 scale (max |w| / 127) and 32 int8."""
    blocks = np.ascontiguousarray(weights, dtype=np.float32).reshape(-1, Q8_BLOCK)
    scale = (np.abs(blocks).max(axis=1) / 127.0).astype(np.float16)
    safe = np.where(scale == 0, 1.0, scale.astype(np.float32))
    quants = np.clip(np.rint(blocks / safe[:, None]), -127, 127).astype(np.int8)
    out = np.empty((len(blocks), Q8_BYTES), dtype=np.uint8)
    out[:, :2] = scale.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = quants.view(np.uint8)
    return out.tobytes()


def _write_tensor(fh: BinaryIO, t: Tensor, bitgen: np.random.BitGenerator) -> None:
    """Random weights of ``t`` in its format, a chunk (≤ 8 MiB) at a time; a ``fill`` (the
    router's structured tensors, all small) whole, as F32 or Q8_0."""
    if t.fill is not None:
        if t.quantized and t.qtype.name != "Q8_0":
            raise ShardscopeError(f"{t.name}: structured weights are written as F32 or Q8_0, not {t.qtype.name}")
        if t.int32:
            fh.write(np.asarray(t.fill(np.random.Generator(bitgen)), dtype="<i4").tobytes())
            return
        weights = np.asarray(t.fill(np.random.Generator(bitgen)), dtype=np.float32)
        if t.row_scale:
            weights = weights * np.asarray(t.row_scale, dtype=np.float32)[:, None]
        fh.write(_q8_0(weights) if t.quantized else weights.astype("<f4").tobytes())
        return
    if t.random_f32:
        weights = np.random.Generator(bitgen).standard_normal((t.n_expert * t.rows, t.cols)) * t.sigma
        if t.row_scale:
            weights *= np.asarray(t.row_scale, dtype=np.float64)[:, None]
        fh.write(weights.astype("<f4").tobytes())
        return
    if not t.quantized:
        fh.write(np.ones(t.rows * t.cols, dtype="<f4").tobytes())
        return
    blocks_per_row = t.cols // t.qtype.block
    rows_per_chunk = max(1, CHUNK_BYTES // t.qtype.row_bytes(t.cols))
    total_rows = t.n_expert * t.rows  # experts are consecutive blocks of rows
    for start in range(0, total_rows, rows_per_chunk):
        n_blocks = min(rows_per_chunk, total_rows - start) * blocks_per_row
        # Random bytes straight into the block layout (4 GB/s with SFC64), finite scales set.
        fh.write(memoryview(random_blocks(t.qtype, n_blocks, t.sigma, bitgen)))


def _validate(size_mb: float, n_layers: int | None, where: str) -> tuple[float, int]:
    if not is_finite_number(size_mb):
        raise ShardscopeError(f"{where}: size_mb must be a finite number of MB, got {size_mb!r}")
    if size_mb <= 0:
        raise ShardscopeError(f"{where}: size_mb must be positive, got {size_mb:g}")
    if size_mb < MIN_SIZE_MB:
        raise ShardscopeError(
            f"{where}: size_mb {size_mb:g} is too small for a synthetic model (minimum {MIN_SIZE_MB:g} MB)")
    if n_layers is None:
        return float(size_mb), default_n_layers(size_mb)
    if isinstance(n_layers, bool) or not isinstance(n_layers, numbers.Integral):
        raise ShardscopeError(f"{where}: n_layers must be an integer, got {n_layers!r}")
    if n_layers < 1:
        raise ShardscopeError(f"{where}: n_layers must be at least 1, got {n_layers}")
    if n_layers > MAX_LAYERS:
        raise ShardscopeError(f"{where}: n_layers {n_layers} is more than llama.cpp allows ({MAX_LAYERS})")
    return float(size_mb), int(n_layers)


def write_common_metadata(writer, shape: Shape, vocab: SynthVocab, size_mb: float, own_shape: bool = False,
              alignment: int = ALIGNMENT, file_type: int = FILE_TYPE_MOSTLY_Q8_0, name: str = "") -> None:
    """``own_shape``: an arch writer (deepseek2, the GQA archs) adds FFN width, heads and rope dims."""
    writer.add_name(name or f"shardscope-synthetic-{size_mb:g}MB")
    writer.add_description("random weights written by shardscope for streaming tests; output is gibberish")
    if alignment != 32:  # 32 is GGUF's default: real files leave the key out
        writer.add_custom_alignment(alignment)
    writer.add_file_type(file_type)
    writer.add_quantization_version(2)
    writer.add_vocab_size(vocab.n_vocab)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layers)
    if not own_shape:
        writer.add_feed_forward_length(shape.n_ff)
        writer.add_head_count(shape.n_head)
        writer.add_head_count_kv(shape.n_head_kv)
        writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_scores(list(vocab.scores))
    writer.add_token_types(list(vocab.token_types))
    writer.add_unk_token_id(vocab.unk_id)
    writer.add_bos_token_id(vocab.bos_id)
    writer.add_eos_token_id(vocab.eos_id)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


NEAR_SIZE = 0.02  # a default-depth MoE shape further off than this tries its neighbours' depths


def _nearest_moe_shape(size_mb: float, shape: Shape, moe, vocab: SynthVocab, where: str) -> Shape:
    """The shape of the size nearest ``size_mb`` among the default depth's and, when that is more
    than NEAR_SIZE off (coarse Q4_K widths: --size-mb 240 made 250 MiB), the depths ±4 around it."""
    from shardscope.engine.synth import synth_moe

    def off(s: Shape) -> float:
        tensors = synth_moe.tensors(s, moe, vocab.n_vocab)
        align = synth_moe.alignment(moe)
        data = sum(-(-t.nbytes // align) * align for t in tensors)
        return abs(header_bytes(s.n_layers, vocab, synth_moe.tensors_per_layer(moe)) + data - size_mb * MIB)

    def aligned(s: Shape) -> bool:  # every expert's slice a whole number of pages (what streaming reads exactly)
        return all(t.nbytes // t.n_expert % memory_calls.PAGE == 0 for t in synth_moe.tensors(s, moe, vocab.n_vocab)
                   if t.n_expert > 1 and "_exps" in t.name)

    best, best_off = shape, off(shape)
    if best_off <= NEAR_SIZE * size_mb * MIB:
        return best
    keep_aligned = aligned(shape)  # a neighbour depth must not trade page-aligned experts for size
    for delta in (-1, 1, -2, 2, -3, 3, -4, 4):
        if 2 <= shape.n_layers + delta <= 64:
            try:
                other = synth_moe.plan(size_mb, shape.n_layers + delta, moe, vocab, where)
            except ShardscopeError:
                continue
            if off(other) < best_off and (aligned(other) or not keep_aligned):
                best, best_off = other, off(other)
    return best


def write_header(writer, tensors) -> None:
    """The tensor infos, the key/values and the header, written and the writer closed: the data
    section (weights, or a hole for a header-only file) is the caller's."""
    import gguf

    for t in tensors:
        if t.quantized:
            writer.add_tensor_info(t.name, t.numpy_shape(), np.dtype(np.uint8),
                                   t.nbytes, raw_dtype=gguf.GGMLQuantizationType(t.qtype.ggml_type))
        else:
            writer.add_tensor_info(t.name, t.numpy_shape(), np.dtype(np.int32 if t.int32 else np.float32), t.nbytes)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
    finally:
        writer.close()


def write_synthetic_model(out_path: str | os.PathLike, size_mb: float, n_layers: int | None = None,
                          seed: int = 0, progress: Callable[[float], None] | None = None,
                          moe=None) -> SynthInfo:
    """Write a llama-architecture GGUF of about ``size_mb`` MiB (±5 %) to ``out_path``.

    ``n_layers`` None picks about sqrt(size_mb) layers (2..64). The same arguments give
    the same bytes. ``progress(fraction)`` is called with 0.0 first, then after each
    tensor, and with 1.0 once the file is in place; an exception raised by it aborts
    the write (nothing is left behind). Raises ShardscopeError for bad arguments, an
    unwritable directory or a full disk; ``out_path`` is then untouched.
    ``moe`` (an ``engine.synth.synth_moe.MoeSpec``) makes it a mixture-of-experts model.
    """
    target = Path(out_path)
    vocab = build_vocab()
    if moe is not None:
        from shardscope.engine.synth import synth_moe

        layers_given = n_layers is not None
        size_mb, n_layers = _validate(size_mb, n_layers or synth_moe.default_n_layers(size_mb, moe),
                                     str(target))
        moe = synth_moe.validate_spec(moe, str(target))
        if layers_given:
            shape = synth_moe.plan(size_mb, n_layers, moe, vocab, str(target))
        else:  # the default depth may have no shape within 5 % (coarse Q4_K/Q6_K widths): a neighbour may
            shape = _nearest_moe_shape(size_mb, synth_moe.plan_near(size_mb, n_layers, moe, vocab, str(target)),
                                       moe, vocab, str(target))
            n_layers = shape.n_layers
        tensors = synth_moe.tensors(shape, moe, vocab.n_vocab)
        header = header_bytes(n_layers, vocab, synth_moe.tensors_per_layer(moe))
        arch = synth_moe.architecture(moe)
        alignment, file_type = synth_moe.alignment(moe), synth_moe.file_type(moe)
    else:
        size_mb, n_layers = _validate(size_mb, n_layers, str(target))
        shape = _plan(size_mb, n_layers, vocab, str(target))
        tensors = _tensors(shape, vocab.n_vocab)
        header = header_bytes(n_layers, vocab)
        arch = "llama"
        alignment, file_type = ALIGNMENT, FILE_TYPE_MOSTLY_Q8_0

    def pad(n: int) -> int:
        return -(-n // alignment) * alignment

    directory = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise ShardscopeError(f"{target}: is a directory, not a file name")
    if not directory.is_dir():
        raise ShardscopeError(f"{target}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ShardscopeError(f"{target}: directory {directory} is not writable")
    expected = header + sum(pad(t.nbytes) for t in tensors)
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        free = None
    if free is not None and free < expected + 16 * MIB:
        raise ShardscopeError(
            f"{target}: not enough disk space for a {expected / MIB:.0f} MB model "
            f"({free / MIB:.0f} MB free in {directory})")

    import gguf  # imported late: it is slow to import and only writing needs it

    partial = target.with_name(target.name + ".partial")
    data_total = sum(t.nbytes for t in tensors)
    written = 0
    fh = None
    try:
        if progress is not None:
            progress(0.0)
        writer = gguf.GGUFWriter(partial, arch=arch)
        own_shape = moe is not None and synth_moe.arch_spec(moe) is not None or arch == "deepseek2"
        write_common_metadata(writer, shape, vocab, size_mb, own_shape=own_shape, alignment=alignment,
                              file_type=file_type)
        if moe is not None:
            synth_moe.add_metadata(writer, shape, moe)
        write_header(writer, tensors)

        # The data section: tensors in the order of their infos, each at the next
        # multiple of the alignment (the offsets write_ti_data_to_file recorded).
        fh = open(partial, "ab")
        for index, t in enumerate(tensors):
            fh.write(b"\0" * (pad(fh.tell()) - fh.tell()))
            _write_tensor(fh, t, np.random.SFC64([seed, index]))
            written += t.nbytes
            if progress is not None and index < len(tensors) - 1:
                progress(written / data_total)
        fh.write(b"\0" * (pad(fh.tell()) - fh.tell()))
        os.fsync(fh.fileno())
        size_bytes = fh.tell()
        fh.close()
        fh = None
        os.replace(partial, target)
        _fsync_dir(directory)
    except OSError as exc:
        _discard(fh, partial)
        raise ShardscopeError(f"{target}: could not be written ({exc.strerror or exc})") from None
    except BaseException:
        _discard(fh, partial)
        raise
    if progress is not None:
        progress(1.0)
    experts = (moe.experts, moe.experts_used, moe.shared_experts) if moe is not None else (0, 0, 0)
    return SynthInfo(str(target), size_bytes, shape.n_layers, shape.n_embd, shape.n_ff, vocab.n_vocab,
                     shape.n_head, shape.n_head_kv, *experts, arch)


def _discard(fh, partial: Path) -> None:
    if fh is not None:
        try:
            fh.close()
        except OSError:
            pass
    try:
        os.unlink(partial)
    except OSError:
        pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["SynthInfo", "write_synthetic_model", "default_n_layers", "ALIGNMENT"]
