"""GGUF layout → shard plan: numeric layer order, slicing, globals, the cache."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.layout.budget_minimum import dense_minimum
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.layout.shard_plan import PAGE, plan_shards


def _write_lexicographic_gguf(path, n_layers=12, rows=512):
    """Layers stored 0, 1, 10, 11, 2, … as some converters do."""
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_custom_alignment(4096)
    names = ["token_embd.weight"]
    for layer in sorted(range(n_layers), key=str):
        names += [f"blk.{layer}.attn_norm.weight", f"blk.{layer}.ffn_up.weight"]
    for name in names:
        shape = (64,) if name.endswith("norm.weight") else (rows, 256)
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_layers_grouped_in_numeric_order(tmp_path):
    path = tmp_path / "lex.gguf"
    _write_lexicographic_gguf(path)
    layout = read_layout(path)
    assert layout.layer_indices == list(range(12))
    plan = plan_shards(layout, 1)  # 512 KiB layers → two per shard
    covered = [layer for shard in plan.shards for layer in shard.layers]
    assert covered == list(range(12))
    for shard in plan.shards:
        for start, end in shard.ranges:
            assert start % PAGE == 0 and end % PAGE == 0
    # norms stay with the globals, so a layer's first node never faults
    assert plan.globals_bytes >= sum(t.n_bytes for t in layout.global_tensors)


def test_big_layer_is_sliced(synthetic_model):
    layout = read_layout(synthetic_model)
    plan = plan_shards(layout, 4)
    assert len(plan.shards) > layout.n_layers
    assert plan.max_shard_bytes <= 4 * MIB
    first = plan.layer_shards[0]
    assert len(first) > 1 and all(plan.shards[i].layers == (0,) for i in first)
    assert plan.streamable_bytes > 0.95 * layout.weight_bytes


def test_min_budget_counts_globals_layer_and_window(tmp_path):
    """Worked by hand on a file whose every size is known: 12 layers of one 512 × 256 f32
    ffn_up (524,288 B = 512 KiB, page-aligned by the 4096 alignment) and one 64-float norm
    (256 B, small: it stays with the globals), plus a 512 × 256 f32 token_embd (512 KiB).
    Shards of 1 MiB hold two layers each: 6 shards of 1,048,576 B, and the layer being
    computed sits in a 1 MiB shard. Globals = 524,288 + 12 × 256 = 527,360 B.
    min budget(depth 2) = 527,360 + 1,048,576 (layer's shard) + 2 × 1,048,576 = 3,673,088 B;
    depth 0: 527,360 + 1,048,576 = 1,575,936 B."""
    path = tmp_path / "lex.gguf"
    _write_lexicographic_gguf(path)
    plan = plan_shards(read_layout(path), 1)
    assert len(plan.shards) == 6 and plan.max_shard_bytes == 1_048_576
    assert plan.globals_bytes == 527_360
    assert dense_minimum(plan, 2).bytes == 3_673_088
    assert dense_minimum(plan, 0).bytes == 1_575_936
    # Past the model's size everything simply fits: 13 × 524,288 + 12 × 256 = 6,818,816 B.
    assert dense_minimum(plan, 8).bytes == 6_818_816


def test_layout_cache_serves_a_reopen_without_parsing_the_file(bundled_model, monkeypatch):
    """The second open comes from the cache: the parser is not called again (its speed is
    bench/goals/layout_cache_reopen.py's ratio, not a limit here)."""
    from shardscope.engine.layout import layout_cache

    first = load_layout(bundled_model)

    def no_parse(path):
        raise AssertionError(f"parsed {path} again instead of reading the cache")

    monkeypatch.setattr(layout_cache, "read_layout", no_parse)
    again = load_layout(bundled_model)
    assert again == first
    assert first.architecture == "gemma3" and first.n_layers == 18


def test_shard_size_must_be_positive(bundled_model):
    with pytest.raises(ShardscopeError, match="shard size"):
        plan_shards(read_layout(bundled_model), 0)


def test_gpu_layers_leave_the_host_plan(synthetic_model):
    layout = read_layout(synthetic_model)
    host_only = plan_shards(layout, 32)
    offloaded = plan_shards(layout, 32, gpu_layers=5)  # the output layer + the last 4 blocks
    assert offloaded.offloaded_layers == tuple(layout.layer_indices[-4:])
    assert all(not offloaded.layer_shards[pos] for pos in range(len(offloaded.layers) - 4, len(offloaded.layers)))
    assert plan_shards(layout, 32, gpu_layers=1).offloaded_layers == ()
    assert offloaded.host_bytes == host_only.total_bytes - offloaded.offloaded_bytes
    assert offloaded.globals_bytes == host_only.globals_bytes
    assert dense_minimum(offloaded, 1).bytes <= dense_minimum(host_only, 1).bytes


def test_n_gpu_layers_without_offload_runs_with_zero(bundled_model):
    from shardscope.engine.knobs.settings import RunSettings
    from shardscope.engine.stream.llama_session import gpu_offload_supported
    from shardscope.engine.stream.streaming_run import StreamingRun

    if gpu_offload_supported():
        pytest.skip("this build can offload")
    with StreamingRun(RunSettings(model_path=bundled_model, n_gpu_layers=8, n_gen=2, n_ctx=64)) as run:
        summary = run.run()
    assert summary.n_gpu_layers == 0 and summary.n_gpu_layers_requested == 8


def test_read_spans_bridge_small_gaps_but_never_another_shards_bytes():
    from shardscope.engine.layout.shard_plan import Shard, ShardPlan
    from shardscope.engine.stream.residency import read_spans

    a = Shard(0, (0,), ((0, 4 * MIB), (4 * MIB + PAGE, 8 * MIB)))  # a norm's page between
    # shard 1's second range sits in shard 2's gap: shard 2 must not read across it
    b = Shard(1, (1,), ((8 * MIB, 9 * MIB), (10 * MIB, 10 * MIB + 4 * PAGE)))
    c = Shard(2, (2,), ((9 * MIB + PAGE, 10 * MIB - PAGE), (10 * MIB + 8 * PAGE, 12 * MIB)))
    plan = ShardPlan("m.gguf", 8 * MIB, (a, b, c), ((0,), (1,), (2,)), (0, 1, 2), 12 * MIB, 12 * MIB)
    spans = read_spans(plan)
    assert spans[0] == [(0, 8 * MIB)]
    assert spans[1] == [(8 * MIB, 9 * MIB), (10 * MIB, 10 * MIB + 4 * PAGE)]
    assert spans[2] == [(9 * MIB + PAGE, 10 * MIB - PAGE), (10 * MIB + 8 * PAGE, 12 * MIB)]
