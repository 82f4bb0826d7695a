"""The synthetic-model writer: size, layout, and that real llama.cpp runs the result."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import math
import re
from pathlib import Path

import numpy as np
import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.synth.synth import SynthInfo, write_synthetic_model

MIB = 1024 * 1024
SIZE_MB = 64


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> SynthInfo:
    path = tmp_path_factory.mktemp("synth") / "synthetic-64.gguf"
    fractions: list[float] = []
    info = write_synthetic_model(path, SIZE_MB, progress=fractions.append)
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    assert all(a <= b for a, b in zip(fractions, fractions[1:]))
    assert len(fractions) > info.n_layers  # called as tensors are written, not just at the end
    return info


# --- a tiny llama.cpp driver (low-level API; the project's session module is elsewhere) ---

def _llama():
    llama_cpp = pytest.importorskip("llama_cpp")
    llama_cpp.llama_backend_init()
    return llama_cpp


def _load(llama_cpp, path: str):
    params = llama_cpp.llama_model_default_params()
    params.use_extra_bufts = False  # mandatory here: AMX repacking segfaults in this VM
    params.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model, f"llama.cpp could not load {path}"
    return model


def _tokenize(llama_cpp, vocab, text: str, add_special: bool) -> list[int]:
    raw = text.encode("utf-8")
    buf = (llama_cpp.llama_token * (len(raw) + 8))()
    n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, len(buf), add_special, False)
    assert n >= 0
    return list(buf[:n])


def _greedy(path: str, prompt: str, n_gen: int) -> list[int]:
    llama_cpp = _llama()
    model = _load(llama_cpp, path)
    try:
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = 256
        cparams.n_batch = 256
        cparams.n_threads = 2
        cparams.n_threads_batch = 2
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        assert ctx
        try:
            vocab = llama_cpp.llama_model_get_vocab(model)
            n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
            tokens = (llama_cpp.llama_token * 256)(*_tokenize(llama_cpp, vocab, prompt, True))
            n_prompt = len(_tokenize(llama_cpp, vocab, prompt, True))
            batch = llama_cpp.llama_batch_get_one(tokens, n_prompt)
            out: list[int] = []
            for _ in range(n_gen):
                assert llama_cpp.llama_decode(ctx, batch) == 0
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
                assert np.isfinite(logits).all(), "non-finite logits"
                assert logits.std() > 0, "constant logits"
                token = int(np.argmax(logits))
                out.append(token)
                tokens[0] = token  # `tokens` stays alive while the batch points at it
                batch = llama_cpp.llama_batch_get_one(tokens, 1)
            return out
        finally:
            llama_cpp.llama_free(ctx)
    finally:
        llama_cpp.llama_model_free(model)


# --- tests ---

def test_size_and_info(model):
    size = Path(model.path).stat().st_size
    assert size == model.size_bytes
    assert abs(size - SIZE_MB * MIB) <= 0.10 * SIZE_MB * MIB
    assert 2 <= model.n_layers <= 64
    assert model.n_vocab <= 1000
    assert model.n_embd % 64 == 0 and model.n_ff % 32 == 0
    assert not Path(model.path + ".partial").exists()


def test_tensor_layout(model):
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(model.path)
    fields = {name: f.contents() for name, f in reader.fields.items()
              if not name.startswith("tokenizer.ggml.") or name.endswith("_id") or name.endswith("model")}
    assert fields["general.architecture"] == "llama"
    assert fields["general.name"] == f"shardscope-synthetic-{SIZE_MB}MB"
    assert fields["llama.block_count"] == model.n_layers
    assert fields["llama.embedding_length"] == model.n_embd
    assert fields["llama.feed_forward_length"] == model.n_ff
    assert fields["tokenizer.ggml.model"] == "llama"
    assert reader.alignment == 4096

    layer_of = re.compile(r"^blk\.(\d+)\.")
    spans: dict[int, list[int]] = {}
    layer_bytes = other_bytes = 0
    order: list[int] = []
    for t in reader.tensors:
        assert t.data_offset % 4096 == 0, t.name
        m = layer_of.match(t.name)
        if m is None:
            assert t.name in {"token_embd.weight", "output_norm.weight", "output.weight"}
            other_bytes += t.n_bytes
            continue
        n = int(m.group(1))
        layer_bytes += t.n_bytes
        if not order or order[-1] != n:
            order.append(n)
        lo, hi = spans.get(n, [t.data_offset, t.data_offset + t.n_bytes])
        spans[n] = [min(lo, t.data_offset), max(hi, t.data_offset + t.n_bytes)]
        if t.tensor_type == gguf.GGMLQuantizationType.F32:
            assert t.name.endswith("_norm.weight")
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert order == list(range(model.n_layers))  # each layer once, numeric order
    assert sorted(spans) == list(range(model.n_layers))
    ranges = [spans[n] for n in range(model.n_layers)]
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, disjoint
    assert layer_bytes > 0.9 * (layer_bytes + other_bytes)
    assert all(f"blk.0.{name}.weight" in {t.name for t in reader.tensors}
               for name in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                            "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"))


def test_llama_cpp_decodes_deterministically(model):
    prompt = "The history of the printing press begins"
    first = _greedy(model.path, prompt, 4)
    second = _greedy(model.path, prompt, 4)
    assert len(first) == 4
    assert first == second


def test_tokenizer_round_trip(model):
    llama_cpp = _llama()
    m = _load(llama_cpp, model.path)
    try:
        vocab = llama_cpp.llama_model_get_vocab(m)
        assert llama_cpp.llama_vocab_n_tokens(vocab) == model.n_vocab
        for text in ("The history of the printing press begins",
                     "Zebras quickly jumped over 42 lazy dogs; café ☕ naïve résumé!"):
            tokens = _tokenize(llama_cpp, vocab, text, True)
            assert tokens[0] == llama_cpp.llama_vocab_bos(vocab)
            arr = (llama_cpp.llama_token * len(tokens))(*tokens)
            buf = ctypes.create_string_buffer(4 * len(text.encode()) + 64)
            n = llama_cpp.llama_detokenize(vocab, arr, len(tokens), buf, len(buf), True, False)
            assert n >= 0
            # SentencePiece keeps the space prefix it added before the first word
            assert buf.raw[:n].decode("utf-8") in (text, " " + text)
        # common words are single pieces, not bytes
        assert len(_tokenize(llama_cpp, vocab, "the printing press", False)) == 3
    finally:
        llama_cpp.llama_model_free(m)


def test_same_seed_same_bytes(tmp_path):
    a = write_synthetic_model(tmp_path / "a.gguf", 8, seed=3)
    b = write_synthetic_model(tmp_path / "b.gguf", 8, seed=3)
    c = write_synthetic_model(tmp_path / "c.gguf", 8, seed=4)
    digest = [hashlib.sha256(Path(x.path).read_bytes()).hexdigest() for x in (a, b, c)]
    assert digest[0] == digest[1] != digest[2]


def test_explicit_layer_count(tmp_path):
    info = write_synthetic_model(tmp_path / "m.gguf", 16, n_layers=12)
    assert info.n_layers == 12
    assert abs(info.size_bytes - 16 * MIB) <= 0.05 * 16 * MIB


@pytest.mark.parametrize("size_mb, n_layers, pattern", [
    (0, None, "positive"),
    (-5, None, "positive"),
    (4, None, "too small"),
    (math.nan, None, "finite"),
    ("64", None, "finite"),
    (64, 0, "at least 1"),
    (64, -3, "at least 1"),
    (64, 2.5, "integer"),
    (64, 10_000, "more than llama.cpp allows"),
    (8, 400, "fewer layers"),
])
def test_bad_arguments(tmp_path, size_mb, n_layers, pattern):
    out = tmp_path / "bad.gguf"
    with pytest.raises(ShardscopeError, match=pattern) as err:
        write_synthetic_model(out, size_mb, n_layers=n_layers)
    assert str(out) in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_missing_directory(tmp_path):
    out = tmp_path / "nope" / "m.gguf"
    with pytest.raises(ShardscopeError, match="does not exist") as err:
        write_synthetic_model(out, 8)
    assert str(out) in str(err.value)


def test_not_enough_space_is_refused_before_writing(tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10 * MIB, 9 * MIB, 1 * MIB))
    out = tmp_path / "m.gguf"
    with pytest.raises(ShardscopeError, match="not enough disk space") as err:
        write_synthetic_model(out, 8)
    assert str(out) in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_disk_full_midway_leaves_old_file_untouched(tmp_path):
    out = tmp_path / "m.gguf"
    out.write_bytes(b"previous model")
    calls = []

    def progress(fraction):
        calls.append(fraction)
        if fraction > 0.3:
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ShardscopeError, match="No space left") as err:
        write_synthetic_model(out, 8, progress=progress)
    assert str(out) in str(err.value)
    assert out.read_bytes() == b"previous model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_interrupt_removes_partial(tmp_path):
    out = tmp_path / "m.gguf"

    class Stop(Exception):
        pass

    def progress(fraction):
        if fraction > 0.5:
            raise Stop

    with pytest.raises(Stop):
        write_synthetic_model(out, 8, progress=progress)
    assert list(tmp_path.iterdir()) == []
