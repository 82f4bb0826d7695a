"""Recurrent state counted: the header arithmetic (engine/layout/recurrent_state.py) against llama.cpp's own
figures (its log lines at context creation, engine/stream/llama_memory.py), and what `size` books."""

from __future__ import annotations

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.layout.recurrent_state import recurrent_state_of_file
from shardscope.engine.stream.llama_session import LlamaSession
from shardscope.engine.synth.synth import write_synthetic_model
from shardscope.engine.synth.synth_moe import MoeSpec

MIB = 2 ** 20
CASES = {  # arch → (MB, layers, experts, used, shared, what llama.cpp keeps)
    "kimi-k3": (24, 8, 32, 4, 2, "KDA"),
    "qwen35moe": (24, 8, 32, 4, 1, "gated delta-net"),
    "deepseek4": (32, 6, 32, 4, 1, "compressor"),
    "glm5-next": (24, 8, 32, 4, 1, "KDA"),
}


@pytest.fixture(scope="module", params=list(CASES))
def hybrid(request, tmp_path_factory):
    arch = request.param
    mb, layers, x, k, shared, _ = CASES[arch]
    path = tmp_path_factory.mktemp(arch) / f"{arch}.gguf"
    write_synthetic_model(path, mb, n_layers=layers, moe=MoeSpec(x, k, shared, arch=arch, routing="uniform"), seed=2)
    return arch, str(path)


def test_state_from_the_header_is_what_llama_cpp_allocates(hybrid):
    arch, path = hybrid
    state, note = recurrent_state_of_file(path)
    assert state > 0 and CASES[arch][5] in note
    with LlamaSession(path, n_threads=2, n_ctx=128) as session:
        seen = session.memory
    # llama.cpp prints MiB with two decimals, one line per buffer (deepseek4: three compressor states)
    assert abs(seen.state_bytes - state) <= 3 * 0.005 * MIB + 0.02 * state, (seen, state)
    assert seen.kv_bytes > 0 and seen.compute_bytes > 0


def test_size_books_the_state_with_the_kv_cache(hybrid, capsys):
    arch, path = hybrid
    assert main(["size", "--gguf", path, "--device", "laptop-16gb"]) == 0
    out = capsys.readouterr().out
    assert "KV cache booked with the model's" in out and CASES[arch][5] in out
