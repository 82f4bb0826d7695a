"""Hit rates count bytes: cache_hit_rate ≈ 1 − kernel-read bytes ÷ bytes needed, in every cell.

Before, the dense run counted layer accesses: with two layers per shard the second
layer's access to a shard just read for the first counted as a hit, so `lru` far below
the model reported 0.50 while reading nearly every byte. Here both sides come from
outside the engine's counters: the kernel's /proc/self/io read_bytes (read by the test
at the first token and at the end) and the bytes needed, from the plan (every decoded
token runs every layer) or, for experts, from the model's expert sizes.
"""

from __future__ import annotations

import psutil
import pytest

from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.stream.streaming_run import prepare_plan

N_GEN = 8


def _kernel_side(run, proc: psutil.Process):
    marks = {}

    def on_token(index, piece, dt):
        if index == 0:
            marks["read0"] = proc.io_counters().read_bytes

    run.on_token = on_token
    summary = run.run()
    return summary, proc.io_counters().read_bytes - marks["read0"]


@pytest.mark.parametrize("policy", ["lru", "pinned"])
@pytest.mark.parametrize("layers_per_shard", [1, 2])
def test_layer_hit_rates_match_the_kernel(synthetic_model, policy, layers_per_shard, capsys):
    _, whole = prepare_plan(RunSettings(model_path=synthetic_model, shard_mb=4096, budget_mb=4096))
    layer_mb = max(whole.shards[0].layer_bytes) / 2**20  # one shard holds every layer: their sizes
    # A shard target just over one (or two) layers: shards then hold exactly that many.
    shard_mb = int(layer_mb * layers_per_shard) + 1
    settings = RunSettings(model_path=synthetic_model, budget_mb=180, shard_mb=shard_mb, prefetch_depth=0,
                           policy=policy, n_gen=N_GEN, n_ctx=128)
    proc = psutil.Process()
    with open_run(settings) as run:
        assert {len(s.layers) for s in run.plan.shards} == {layers_per_shard}
        streamable = run.plan.streamable_bytes
        summary, kernel_read = _kernel_side(run, proc)
    needed = streamable * (summary.n_gen - 1)  # every decoded token runs every layer
    kernel_hit = 1 - kernel_read / needed
    with capsys.disabled():
        print(f"\n| {policy} | {layers_per_shard} | {summary.cache_hit_rate:.3f} | {summary.on_time_rate:.3f} "
              f"| {kernel_hit:.3f} | {kernel_read / 2**20:.0f} of {needed / 2**20:.0f} MiB |")
    assert kernel_read > 0.2 * needed  # it streamed
    assert summary.cache_hit_rate == pytest.approx(kernel_hit, abs=0.05)
    # With no prefetch, a read can come before compute only for a shard's second layer:
    # at one layer per shard "on time" is "not read" too; otherwise it can only be more.
    if layers_per_shard == 1:
        assert summary.on_time_rate == pytest.approx(kernel_hit, abs=0.05)
    else:
        assert summary.on_time_rate >= summary.cache_hit_rate


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe-bytes") / "moe-100.gguf"
    write_synthetic_model(path, 100, moe=MoeSpec(16, 4, routing_skew=2.0), seed=3)
    return str(path)


@pytest.mark.parametrize("policy", ["lru", "lfu", "auto"])  # auto: the default (its shadows pick the order)
def test_expert_hit_rate_matches_the_kernel(small_moe, policy, capsys):
    """Expert figures follow the same rule, with one name each: cache_hit_rate (resident with no
    read) and expert_hit_rate (resident when picked; no speculation here, so the same bytes), each
    against 1 − the kernel's read bytes ÷ the picked experts' bytes."""
    settings = RunSettings(model_path=small_moe, budget_mb=60, expert_cache_mb=34, expert_policy=policy,
                           n_gen=N_GEN, n_ctx=128)
    proc = psutil.Process()
    with open_run(settings) as run:
        moe = run.moe
        summary, kernel_read = _kernel_side(run, proc)
        shadows = run.streamer.cache.shadows
    assert summary.expert_policy == policy
    if policy == "auto":  # the live cache followed its shadow directories, one per candidate
        from shardscope.engine.experts.adaptive_policy import CANDIDATES

        assert shadows is not None and set(shadows.caches) == set(CANDIDATES)
        assert sum(shadows.hits.values()) > 0  # the shadows scored decoded hits
    per_token = sum(moe.unit_bytes(layer) for layer in moe.layers) * moe.n_expert_used
    needed = per_token * (summary.n_gen - 1)
    kernel_hit = 1 - kernel_read / needed
    with capsys.disabled():
        print(f"\n| experts {policy} | – | {summary.cache_hit_rate:.3f} | {summary.expert_hit_rate:.3f} "
              f"| {kernel_hit:.3f} | {kernel_read / 2**20:.1f} of {needed / 2**20:.1f} MiB |")
    assert kernel_read > 0
    # Both against the kernel, not against each other (expert_run sets expert_hit_rate from the
    # on-time count): with no speculation an expert resident when picked is one not read.
    assert summary.cache_hit_rate == pytest.approx(kernel_hit, abs=0.05)
    assert summary.expert_hit_rate == pytest.approx(kernel_hit, abs=0.05)
