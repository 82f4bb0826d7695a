"""deepseek4's hash-routed layers: the picks the engine derives from the token id are llama.cpp's own, and
they are loaded ahead of their layer (engine/experts/hash_prefetch.py).

Held against what llama.cpp picked (the ffn_moe_topk ids the streamer records in its routing trace) and
the kernel's read counter; with the prefetch off nothing is loaded ahead."""

from __future__ import annotations

import pytest

from conftest import drop_from_page_cache
from shardscope.engine.experts.expert_run import ExpertRun
from shardscope.engine.experts.hash_prefetch import hash_tables
from shardscope.engine.experts.trace_stats import format_stats, trace_stats
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.synth.synth import write_synthetic_model
from shardscope.engine.synth.synth_deepseek4 import tid2eid
from shardscope.engine.synth.synth_moe import defaults_for

N_GEN = 12


@pytest.fixture(scope="module")
def ds4(tmp_path_factory):
    path = tmp_path_factory.mktemp("ds4") / "ds4.gguf"
    write_synthetic_model(path, 64, n_layers=6, moe=defaults_for("deepseek4"), seed=4)
    return str(path)


def _run(path, on: bool, trace=None):
    settings = RunSettings(model_path=path, budget_mb=30, n_gen=N_GEN, n_ctx=128,
                           prompt="The history of the printing press begins", expert_policy="lru")
    kind = ExpertRun if on else type("NoHashPrefetch", (ExpertRun,), {"hash_prefetch": False})
    drop_from_page_cache(path)
    with kind(settings, trace_path=trace) as run:
        summary = run.run()
        return summary, list(run.tokens), run.routing_records()


def test_the_file_holds_three_token_id_tables(ds4):
    tables = hash_tables(read_layout(ds4))
    assert sorted(tables) == [0, 1, 2] and all(k == 6 for _, _, k in tables.values())


def test_hash_picks_are_llama_cpps_and_loaded_ahead(ds4, tmp_path):
    on, tokens_on, trace = _run(ds4, True, str(tmp_path / "t.jsonl"))
    off, tokens_off, _ = _run(ds4, False)
    assert tokens_on == tokens_off  # the prefetch changes what is resident, not the text
    # llama.cpp's picks in the hash layers (its ffn_moe_topk ids, recorded per decoded token) are the table's
    # rows of the tokens decoded: the input of decode i is the token sampled before it
    n_vocab = read_layout(ds4).tensors[0].shape[1]
    decoded = [r for r in trace.records if not r.prompt and r.layer < 3]
    inputs = tokens_on[:-1]
    by_token = sorted({r.token for r in decoded})
    assert len(by_token) == len(inputs)
    for index, token in enumerate(by_token):
        for r in (r for r in decoded if r.token == token):
            assert set(r.experts) == set(tid2eid(n_vocab, 256, 6, r.layer)[inputs[index]].tolist())
    assert on.hash_picks_ahead == 3 * 6 * (N_GEN - 1)  # every decoded token's hash picks, known ahead
    # every decoded token's hash picks resident before their layer (the decode starts once they land);
    # without the prefetch, only the tokens whose picks the cache held anyway
    assert on.hash_misses_hidden > 0 and on.hash_ready_share == 1.0 > off.hash_ready_share
    assert off.hash_picks_ahead == 0 and off.hash_misses_hidden == 0
    # the kernel read what the streamer loaded (the prefetched misses included)
    assert abs(on.expert_mb_per_token - on.read_mb_per_token) <= 0.05 * on.read_mb_per_token + 0.01
    assert trace.header.hash_layers == (0, 1, 2)
    text = format_stats(trace_stats(trace), "ds4")
    assert "| 0 (hash) |" in text and "scored layers alone" in text
