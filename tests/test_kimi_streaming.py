"""A Kimi-shaped model (llama.cpp's deepseek2: MLA, a dense first layer, 384 experts top-8
+ 1 shared, sigmoid router with a per-expert bias) written, streamed and replayed.

Checked against sources the streamer does not compute: llama.cpp's greedy tokens with no
callback installed, the kernel's /proc/self/io read counter, and the file's own tensors.
"""

from __future__ import annotations

import os

import pytest

from shardscope.engine.cli.cli import main
from shardscope.engine.experts.expert_run import ExpertRun
from shardscope.engine.experts.replay import replay_one
from shardscope.engine.experts.routing_trace import read_trace
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout

MIB = 1024 * 1024
PROMPT = "The history of the printing press begins"
N_GEN = 10


@pytest.fixture(scope="session")
def kimi_model(tmp_path_factory) -> str:
    """~300 MB: 5 layers (1 dense + 4 MoE of 384 experts), page-aligned 204 KiB experts."""
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import like_kimi_k2

    path = tmp_path_factory.mktemp("kimi") / "kimi-300.gguf"
    info = write_synthetic_model(path, 300, n_layers=5, moe=like_kimi_k2(routing_skew=2.0), seed=3)
    assert info.architecture == "deepseek2" and abs(info.size_bytes - 300 * MIB) <= 0.05 * 300 * MIB
    return str(path)


@pytest.fixture(scope="session")
def kimi_reference(kimi_model) -> list[int]:
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(kimi_model, n_threads=2, n_ctx=128) as session:  # all resident, no callback
        return session.generate(PROMPT, N_GEN).tokens


def _settings(path: str, **kw) -> RunSettings:
    return RunSettings(model_path=path, budget_mb=round(os.path.getsize(path) / MIB / 3), n_gen=N_GEN, n_ctx=128,
                       prompt=PROMPT, **kw)


def test_file_has_kimis_shape(kimi_model):
    layout = read_layout(kimi_model)
    meta = layout.metadata
    assert layout.architecture == "deepseek2"
    assert (meta["deepseek2.expert_count"], meta["deepseek2.expert_used_count"],
            meta["deepseek2.expert_shared_count"]) == (384, 8, 1)
    assert meta["deepseek2.leading_dense_block_count"] == 1
    assert meta["deepseek2.expert_gating_func"] == 2 and meta["deepseek2.expert_weights_norm"]
    names = {t.name for t in layout.tensors}
    assert {"blk.0.ffn_gate.weight", "blk.1.exp_probs_b.bias", "blk.1.attn_kv_a_mqa.weight", "blk.1.attn_k_b.weight",
            "blk.1.attn_q_a.weight", "blk.1.ffn_up_shexp.weight"} <= names
    assert not any(n.startswith("blk.0.ffn_") and "exps" in n for n in names)
    moe = read_moe_layout(layout)
    assert moe.layers == (1, 2, 3, 4) and moe.gating == "sigmoid" and set(moe.router_biases) == {1, 2, 3, 4}
    # shared experts and the dense first layer are dense bytes: never streamed as experts
    shexp = [t for t in layout.tensors if "_shexp" in t.name or t.name.startswith("blk.0.ffn_")]
    assert all(any(lo <= t.offset and t.offset + t.n_bytes <= hi for lo, hi in moe.dense_ranges) for t in shexp)
    assert all(lo % 4096 == 0 and hi % 4096 == 0 for lo, hi in moe.unit_ranges(2, 7))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru", "lfu", "hot"])
@pytest.mark.parametrize("speculation", [False, True])
def test_kimi_tokens_identical_at_a_third(kimi_model, kimi_reference, tmp_path, policy, speculation):
    trace = tmp_path / "trace.jsonl"
    with ExpertRun(_settings(kimi_model, expert_policy=policy, expert_speculation=speculation),
                   trace_path=str(trace)) as run:
        summary = run.run()
        tokens, cache_bytes = run.tokens, run.cache_bytes
    assert tokens == kimi_reference
    assert summary.expert_misses > 0 and 0 < summary.expert_hit_rate < 1
    if speculation:  # the guess applies the next layer's sigmoid + bias router: mostly right
        assert summary.spec_accuracy > 0.3
    else:
        replayed = replay_one(read_trace(trace), policy, cache_bytes)
        assert (replayed.hits, replayed.misses) == (summary.expert_hits, summary.expert_misses)


@pytest.mark.slow
def test_kimi_bytes_read_are_the_missed_experts(kimi_model):
    moe = read_moe_layout(read_layout(kimi_model))
    with ExpertRun(_settings(kimi_model, expert_policy="lru")) as run:
        summary = run.run()
        per_token = run.per_token
    assert summary.dense_mb_per_token == 0
    assert sum(row["misses"] for row in per_token) > 0
    for row in per_token:  # /proc/self/io per decoded token = the missed experts' bytes
        assert row["expert_bytes"] == row["misses"] * moe.unit_bytes(moe.layers[0])
        assert abs(row["read_bytes"] - row["expert_bytes"]) <= 0.05 * row["expert_bytes"] + 64 * 1024, row


def test_synth_cli_writes_kimi_shape_and_refuses_bad_arch(tmp_path, capsys):
    out = tmp_path / "k.gguf"
    assert main(["synth", "--moe", "--like", "kimi-k2", "--size-mb", "60", "--out", str(out), "--quiet"]) == 0
    assert "384 experts (top-8, 1 shared), arch deepseek2" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "--moe", "--arch", "mamba", "--size-mb", "60", "--out", str(tmp_path / "x.gguf")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--arch" in err[0] and not (tmp_path / "x.gguf").exists()


@pytest.mark.slow
def test_emulated_ssd_latency_is_paid_per_layer_that_misses(kimi_model):
    """--ssd-latency-us: every token that misses waits at least the latency once per layer with misses."""
    from shardscope.engine.stream.ssd_rate_limiter import configure_emulation, emulated_latency

    before = emulated_latency()
    configure_emulation(latency_us=5000, queue_depth=32)  # 5 ms: far above this host's own reads
    try:
        with ExpertRun(_settings(kimi_model, ssd_mb_s=2000.0)) as run:
            summary = run.run()
            per_token = run.per_token
            assert run.streamer.limiter.latency_s == pytest.approx(0.005)
    finally:
        configure_emulation(before[0] * 1e6, before[1])
    missing_tokens = sum(1 for row in per_token if row["misses"] > 0)
    assert missing_tokens > 0
    waited_s = summary.expert_wait_ms_per_token / 1000 * len(per_token)
    assert waited_s >= 0.9 * 0.005 * missing_tokens


@pytest.mark.parametrize("budget_mb", [2000, 100])  # fits (no streaming) and streams experts: both refused
def test_deepseek2_without_rope_dims_is_refused_before_llama_aborts(kimi_model, tmp_path, capsys, budget_mb):
    from pathlib import Path

    data = bytearray(Path(kimi_model).read_bytes())
    key = b"deepseek2.rope.dimension_count"
    at = data.index(key)
    data[at:at + len(key)] = b"deepseek2.rope.dimension_cXunt"  # same length: the file stays valid GGUF
    bad = tmp_path / "norope.gguf"
    bad.write_bytes(data)
    assert main(["bench", "--model", str(bad), "--budget-mb", str(budget_mb), "--tokens", "2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rope.dimension_count is missing" in err[0] and str(bad) in err[0]
