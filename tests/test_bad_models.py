"""Bad model files: each gives one clear ShardscopeError naming the file, engine stays usable.

The GGUF header reader is also fuzzed: whatever the bytes, nothing but the project's
own error type may escape (no struct.error, no MemoryError, no endless loop).
"""

from __future__ import annotations

import os
import struct

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.stream.streaming_run import StreamingRun


def _small_gguf(path) -> bytes:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_block_count(2)
    for layer in range(2):
        writer.add_tensor(f"blk.{layer}.ffn_up.weight", np.ones((64, 64), dtype=np.float32))
    writer.add_tensor("token_embd.weight", np.ones((32, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return open(path, "rb").read()


@pytest.fixture(scope="module")
def valid_bytes(tmp_path_factory) -> bytes:
    return _small_gguf(tmp_path_factory.mktemp("g") / "small.gguf")


def _expect(path, *needles):
    with pytest.raises(ShardscopeError) as info:
        read_layout(path)
    message = str(info.value)
    assert os.path.basename(str(path)) in message
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


def test_empty_file(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    _expect(path, "empty")


def test_directory(tmp_path):
    _expect(tmp_path, "directory")


def test_absurd_tensor_count(tmp_path, valid_bytes):
    data = bytearray(valid_bytes)
    data[8:16] = struct.pack("<Q", 2**40)
    path = tmp_path / "count.gguf"
    path.write_bytes(bytes(data))
    _expect(path, "2^40".replace("2^40", str(2**40)), "impossible")


def test_string_length_beyond_file(tmp_path, valid_bytes):
    data = bytearray(valid_bytes)
    data[24:32] = struct.pack("<Q", 10**12)  # length of the first metadata key
    path = tmp_path / "strlen.gguf"
    path.write_bytes(bytes(data))
    _expect(path, "truncated")


def test_unreadable_file(tmp_path, valid_bytes, monkeypatch):
    path = tmp_path / "locked.gguf"
    path.write_bytes(valid_bytes)
    if os.geteuid() != 0:
        path.chmod(0)
    else:  # root reads through any mode bits: make the open fail as it would for a user
        real_open = open

        def deny(file, *args, **kwargs):
            if str(file) == str(path):
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr("builtins.open", deny)
    _expect(path, "permission denied")


def test_unsupported_architecture_is_refused_by_llama_cpp(tmp_path, synthetic_model):
    data = bytearray(open(synthetic_model, "rb").read())
    marker = b"general.architecture"
    at = data.index(marker) + len(marker) + 4 + 8  # key, value type, string length
    assert data[at:at + 5] == b"llama"
    data[at:at + 5] = b"zorgx"
    path = tmp_path / "alien.gguf"
    path.write_bytes(bytes(data))
    run_settings = RunSettings(model_path=str(path), budget_mb=4096, n_gen=2, n_ctx=64)
    with pytest.raises(ShardscopeError) as info:
        with StreamingRun(run_settings) as run:
            run.run()
    assert "alien.gguf" in str(info.value) and "zorgx" in str(info.value)
    # the engine is still usable afterwards
    with StreamingRun(run_settings.with_changes(model_path=synthetic_model)) as run:
        assert run.run().n_gen == 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=4096))
def test_fuzz_random_bytes(tmp_path, blob):
    path = tmp_path / "fuzz.gguf"
    path.write_bytes(blob)
    try:
        read_layout(path)
    except ShardscopeError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_mutated_valid_header(tmp_path, valid_bytes, data):
    blob = bytearray(valid_bytes)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, min(len(blob) - 1, 600)))
        blob[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    path = tmp_path / "mutant.gguf"
    path.write_bytes(bytes(blob))
    try:
        layout = read_layout(path)
    except ShardscopeError:
        return
    for tensor in layout.tensors:  # whatever was accepted lies inside the file
        assert tensor.offset + tensor.n_bytes <= layout.file_size
