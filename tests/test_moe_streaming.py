"""Expert streaming against real llama.cpp: same tokens, exact bytes, real eviction, honest replay.

Every figure is checked against a source the streamer does not compute: llama.cpp's
greedy tokens without any callback, the kernel's read counters (/proc/self/io, and
/proc/<pid>/io read by another process), and mincore at each token boundary.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
N_GEN = 12


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory) -> str:
    """≥ 400 MB, 64 experts, top-8, a skewed router (real routers are), page-aligned experts."""
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe") / "moe-450.gguf"
    info = write_synthetic_model(path, 450, moe=MoeSpec(64, 8, routing_skew=2.0), seed=5)
    assert info.size_bytes >= 400 * MIB
    moe = read_moe_layout(read_layout(path))
    assert all(lo % 4096 == 0 and hi % 4096 == 0 for layer in moe.layers for lo, hi in moe.unit_ranges(layer, 1))
    return str(path)


@pytest.fixture(scope="module")
def reference_tokens(moe_model) -> list[int]:
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(moe_model, n_threads=2, n_ctx=128) as session:  # all resident, no callback
        return session.generate(PROMPT, N_GEN).tokens


def _budget(path: str) -> float:
    return round(os.path.getsize(path) / MIB / 3)


def _settings(path: str, **kw) -> RunSettings:
    return RunSettings(model_path=path, budget_mb=_budget(path), n_gen=N_GEN, n_ctx=128, prompt=PROMPT, **kw)


def _proc_io_from_outside(pid: int) -> int:
    out = subprocess.run(["cat", f"/proc/{pid}/io"], capture_output=True, text=True, check=True).stdout
    return int(next(line.split()[1] for line in out.splitlines() if line.startswith("read_bytes:")))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru", "lfu", "hot", "decay", "auto"])
@pytest.mark.parametrize("speculation", [False, True])
def test_tokens_identical_at_a_third_of_the_model(moe_model, reference_tokens, tmp_path, policy, speculation):
    trace = tmp_path / "trace.jsonl"
    with ExpertRun(_settings(moe_model, expert_policy=policy, expert_speculation=speculation),
                   trace_path=str(trace)) as run:
        summary = run.run()
        tokens = run.tokens
        cache_bytes = run.cache_bytes
    assert tokens == reference_tokens
    assert summary.budget_mb < os.path.getsize(moe_model) / MIB / 2.9
    assert summary.expert_misses > 0 and 0 < summary.expert_hit_rate < 1
    if not speculation:  # the replay reproduces the run's own decisions
        replayed = replay_one(read_trace(trace), policy, cache_bytes)
        assert abs(replayed.expert_hit_rate - summary.expert_hit_rate) <= 0.02
        assert (replayed.hits, replayed.misses) == (summary.expert_hits, summary.expert_misses)
    else:  # guesses were loaded, and most of them were what the next layer's router then picked
        assert summary.spec_accuracy > 0.3 and summary.spec_hidden_share > 0


@pytest.mark.io_paths  # make test runs it again with SHARDSCOPE_IO=portable (conftest.py)
@pytest.mark.slow
def test_bytes_read_are_the_missed_experts_and_evicted_experts_are_gone(moe_model, io_path):
    moe = read_moe_layout(read_layout(moe_model))
    pid = os.getpid()
    checks = {"tokens": 0, "outside": []}

    def on_token(index: int, piece: str, dt: float) -> None:  # `run` is the one opened below
        streamer = run.streamer
        cached = streamer.resident_units()
        for layer in moe.layers:
            for expert in range(moe.n_expert):
                unit = (layer, expert)
                resident = streamer.unit_resident_bytes(unit)
                if unit in cached:
                    assert resident == moe.unit_bytes(layer), f"{unit} in the cache but not all resident"
                else:
                    assert resident == 0, f"{unit} evicted but {resident} bytes still resident"
        checks["tokens"] += 1
        if index == 0 or index == N_GEN - 1:
            checks["outside"].append((_proc_io_from_outside(pid), streamer.snapshot_counters().loaded_bytes))

    with ExpertRun(_settings(moe_model, expert_policy="lru"), on_token=on_token) as run, io_path.watch(moe_model):
        summary = run.run()
        per_token = run.per_token
    io_path.check(summary.io_path)
    assert checks["tokens"] == N_GEN
    assert summary.dense_mb_per_token == 0  # dense weights stay resident: nothing of them streams
    for row in per_token:  # /proc/self/io per decoded token = the missed experts' bytes
        assert abs(row["read_bytes"] - row["expert_bytes"]) <= 0.05 * row["expert_bytes"] + 64 * 1024, row
        assert row["expert_bytes"] == row["misses"] * moe.unit_bytes(moe.layers[0])
    (read0, loaded0), (read1, loaded1) = checks["outside"]
    assert loaded1 > loaded0
    assert abs((read1 - read0) - (loaded1 - loaded0)) <= 0.05 * (loaded1 - loaded0)


@pytest.mark.slow
def test_bench_cli_prints_expert_figures_and_writes_trace(moe_model, tmp_path, capsys):
    trace, csv = tmp_path / "t.jsonl", tmp_path / "runs.csv"
    assert main(["bench", "--model", moe_model, "--budget-mb", str(_budget(moe_model)), "--tokens", "6",
                 "--expert-policy", "hot", "--trace", str(trace), "--csv", str(csv), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "experts    64 per layer, top-8" in out and "hit rate" in out
    assert "per token" in out and "waiting for experts" in out and "computing" in out
    assert read_trace(trace).n_decoded == 5
    header = csv.read_text().splitlines()[0].split(",")
    assert {"expert_hit_rate", "dense_mb_per_token", "expert_mb_per_token", "compute_ms_per_token"} <= set(header)


def test_budget_below_the_minimum_is_refused(moe_model, capsys):
    """Below dense + two layers' picks (engine/layout/budget_minimum.py) the run is refused; a
    layer's whole bank is no longer the floor (the prompt goes in micro-batches that fit)."""
    from shardscope.engine.layout.budget_minimum import min_budget_mb

    floor = min_budget_mb(read_moe_layout(read_layout(moe_model)), False)
    assert main(["bench", "--model", moe_model, "--budget-mb", str(floor - 1), "--tokens", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "minimum" in err[0] and "--budget-mb" in err[0]


def test_expert_cache_over_budget_is_refused(moe_model, capsys):
    assert main(["bench", "--model", moe_model, "--budget-mb", "150", "--expert-cache-mb", "400"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("shardscope: error: --expert-cache-mb 400")


def _patched(src: str, dst: Path, old: bytes, new: bytes, value: int | None = None) -> str:
    data = bytearray(Path(src).read_bytes()[: 2 * MIB])  # the header is all that matters here
    at = data.index(old)
    data[at:at + len(old)] = new
    if value is not None:  # key, then u32 type, then the u32 value
        pos = at + len(new) + 4
        data[pos:pos + 4] = value.to_bytes(4, "little")
    data += Path(src).read_bytes()[2 * MIB:]
    dst.write_bytes(bytes(data))
    return str(dst)


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("small-moe") / "m.gguf"
    write_synthetic_model(path, 24, n_layers=2, moe=MoeSpec(8, 2))
    return str(path)


@pytest.mark.parametrize("old, new, value, words", [
    (b"llama.expert_used_count", b"llama.expert_used_xxxxx", None, "llama.expert_used_count is missing"),
    (b"llama.expert_count", b"llama.expert_xxxxx", None, "llama.expert_count is missing"),
    (b"llama.expert_used_count", b"llama.expert_used_count", 9, "expert_used_count is 9"),
    (b"llama.expert_count", b"llama.expert_count", 3, "does not divide"),
])
def test_bad_moe_files_exit_2_before_llama_cpp(small_moe, tmp_path, capsys, old, new, value, words):
    bad = _patched(small_moe, tmp_path / "bad.gguf", old, new, value)
    assert main(["bench", "--model", bad, "--budget-mb", "8", "--tokens", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad in err[0] and words in err[0]


def test_dense_model_refuses_a_trace(synthetic_model, tmp_path, capsys):
    assert main(["bench", "--model", synthetic_model, "--budget-mb", "200", "--trace", str(tmp_path / "t.jsonl")]) == 2
    assert "no experts to trace" in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.slow
def test_speculation_turns_misses_into_hits(moe_model):
    """Same tokens, so the same router picks: guesses loaded ahead can only be seen as hits."""
    rates = {}
    for speculation in (False, True):
        with ExpertRun(_settings(moe_model, expert_policy="lru", expert_speculation=speculation)) as run:
            rates[speculation] = run.run()
    off, on = rates[False], rates[True]
    assert on.expert_hits + on.expert_misses == off.expert_hits + off.expert_misses
    assert on.expert_hit_rate > off.expert_hit_rate
    # the hidden share is the misses it took away
    assert on.expert_misses <= off.expert_misses * (1 - on.spec_hidden_share) + 8
