"""The MoE run API the window drives: open_run, ExpertRun's StreamingRun surface, the expert
view, expert figures in samples, the in-memory routing trace and its cacheability curve, and
SSD emulation for expert loads. Real llama.cpp runs on a small synthetic MoE (~100 MB).

Figures are checked against sources the streamer does not compute: mincore over each
expert's bytes, the kernel's /proc/self/io read counter, and `shardscope replay`'s output.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.cli.cli import main
from shardscope.engine.experts.expert_run import ExpertRun
from shardscope.engine.experts.replay import cacheability
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import is_moe, open_run
from shardscope.engine.stream.streaming_run import StreamingRun

MIB = 1024 * 1024
N_GEN = 6


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("moe-api") / "moe-100.gguf"
    write_synthetic_model(path, 100, moe=MoeSpec(16, 4, routing_skew=2.0), seed=3)
    return str(path)


def _settings(path: str, **kw) -> RunSettings:
    values = dict(model_path=path, budget_mb=60, n_gen=N_GEN, n_ctx=128)
    values.update(kw)
    return RunSettings(**values)


def test_open_run_picks_the_run_kind(small_moe, bundled_model):
    assert is_moe(_settings(small_moe)) and not is_moe(RunSettings(model_path=bundled_model))
    with open_run(_settings(small_moe)) as run:
        assert isinstance(run, ExpertRun)
        assert (run.moe.n_layers, run.moe.n_expert, run.moe.n_expert_used) == (3, 16, 4)
        assert run.moe.dense_bytes + run.moe.expert_bytes <= os.path.getsize(small_moe)
    with open_run(_settings(small_moe, budget_mb=400)) as run:  # fits: layer streaming as for dense models
        assert isinstance(run, StreamingRun)
        assert run.apply(run.settings.with_changes(budget_mb=300)) == "live"
        assert run.apply(run.settings.with_changes(budget_mb=60)) == "restart"  # open_run: expert streaming now
    with open_run(RunSettings(model_path=bundled_model, budget_mb=400)) as run:
        assert isinstance(run, StreamingRun)


def test_continuous_rounds_live_changes_and_view_match_the_kernel(small_moe):
    """Three rounds; between them the cache shrinks, the policy and threads change live; at every
    token boundary the view's evicted experts hold no pages (mincore) and its resident ones do."""
    checked = {"tokens": 0}
    summaries = []

    def on_token(index, piece, dt):  # `run` is the test's own, opened below
        view = run.expert_view()
        st = run.streamer
        for row, layer in enumerate(view.layers):
            for expert in range(run.moe.n_expert):
                resident = st.unit_resident_bytes((layer, expert))
                if view.states[row, expert] == 0:
                    assert resident == 0
                elif view.states[row, expert] in (2, 3):
                    assert resident > 0
        if index > 0:  # token 0 comes from the prompt pass: its picks are the prompt's union
            assert view.picked.sum() == len(view.layers) * run.moe.n_expert_used
        assert view.current_layer == len(view.layers) - 1  # the last MoE layer picked last
        assert view.states.dtype == np.uint8 and view.states.shape == (len(view.layers), run.moe.n_expert)
        resident_units = int((view.states >= 2).sum())
        assert resident_units * run.moe.max_unit_bytes <= run.cache_bytes
        checked["tokens"] += 1

    def on_summary(summary):
        summaries.append(summary)
        if len(summaries) == 1:
            new = run.settings.with_changes(expert_cache_mb=36, expert_policy="lfu", threads=1)
            assert run.apply(new) == "live"
            assert run.settings.expert_cache_mb == 0  # taken at the next token boundary, not now
        if len(summaries) == 3:
            run.stop()

    with ExpertRun(_settings(small_moe), on_token=on_token) as run:
        assert run.apply(run.settings.with_changes(n_ctx=256)) == "restart"
        assert run.apply(run.settings.with_changes(model_path="/elsewhere.gguf")) == "restart"
        before = run.settings
        with pytest.raises(ShardscopeError, match="--expert-cache-mb 500"):
            run.apply(before.with_changes(expert_cache_mb=500, threads=1))
        assert run.settings == before  # refused: nothing moved
        result = run.run(continuous=True, on_summary=on_summary)
        assert run.stopping
        assert result is summaries[-1] and len(summaries) == 3
        view = run.expert_view()
        window = view.window
        decoded = sum(s.n_gen - 1 for s in summaries)
        assert view.heat.sum() == len(view.layers) * run.moe.n_expert_used * min(decoded, window)
        gen = [s for s in run.samples if s.phase == "generating"]
        dense_mb = run.moe.dense_bytes / MIB
    assert checked["tokens"] == 3 * N_GEN
    assert summaries[0].expert_cache_mb == pytest.approx(60 - dense_mb, abs=0.1)
    assert summaries[0].expert_policy == "auto"
    assert summaries[2].expert_cache_mb == 36 and summaries[2].expert_policy == "lfu"
    assert summaries[2].n_threads == 1
    assert gen and all(0 <= s.expert_hit_rate <= 1 for s in gen if not math.isnan(s.expert_hit_rate))
    assert any(s.expert_mb_per_token > 0 for s in gen)
    assert all(s.dense_mb_per_token == 0 for s in gen if not math.isnan(s.dense_mb_per_token))


def test_dense_samples_have_no_expert_figures(bundled_model):
    with open_run(RunSettings(model_path=bundled_model, budget_mb=400, n_gen=3, n_ctx=128)) as run:
        run.run()
        samples = list(run.samples)
    assert samples and all(math.isnan(s.expert_hit_rate) and math.isnan(s.expert_mb_per_token) for s in samples)


def test_session_trace_gives_the_same_curve_as_shardscope_replay(small_moe, tmp_path, capsys):
    trace = tmp_path / "run.jsonl"
    with open_run(_settings(small_moe, n_gen=10), trace_path=str(trace)) as run:
        summary = run.run()
        records = run.routing_records()
    sizes, policies = [34.0, 48.0, 90.0], ["lru", "lfu", "hot"]
    curve = cacheability(records, sizes, policies)
    assert curve == cacheability(trace, sizes, policies)  # in memory = the file --trace wrote
    # At the run's own size and policy the curve gives the run's hit rate (no speculation).
    at_run = cacheability(records, [summary.expert_cache_mb], [summary.expert_policy])[summary.expert_policy][0][1]
    assert at_run == pytest.approx(summary.expert_hit_rate, abs=0.02)
    assert main(["replay", str(trace), "--cache-mb", "34,48,90", "--policy", "lru,lfu,hot"]) == 0
    printed = {}
    for line in capsys.readouterr().out.splitlines()[2:]:
        if not line.startswith("|"):  # the verdict lines under the table (best policy per size)
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        printed[(cells[1], float(cells[2]))] = cells[3]
    assert set(printed) == {(p, mb) for p in policies for mb in sizes}
    for policy, points in curve.items():
        assert [mb for mb, _ in points] == sizes
        for mb, hit in points:
            assert printed[(policy, mb)] == f"{100 * hit:.1f} %"
    assert curve["lru"][-1][1] > curve["lru"][0][1]  # a bigger cache hits more
    with pytest.raises(ShardscopeError, match="--cache-mb 1: below"):
        cacheability(records, [1.0], ["lru"])


def test_emulated_ssd_caps_expert_loads(small_moe):
    """Kernel read bytes over decode time stay at or below the emulated rate."""
    rate = 150.0
    with open_run(_settings(small_moe, ssd_mb_s=rate, expert_cache_mb=34)) as run:
        assert run.streamer is None or run.streamer.ssd_mb_s == rate
        summary = run.run()
    assert summary.emulated_ssd_mb_s == rate
    assert summary.expert_misses > 0 and summary.read_mb_per_token > 0
    assert 0 < summary.ssd_mb_s <= rate * 1.05


def test_sweep_varies_the_expert_knobs_of_an_moe(small_moe):
    from shardscope.engine.search.sweep import iter_sweep

    grid = {"expert_policy": ["lru", "hot"], "expert_speculation": [False, True]}
    results = list(iter_sweep(_settings(small_moe, n_gen=3), grid))
    assert [r.error for r in results] == [None] * 4
    got = [(r.summary.expert_policy, r.summary.expert_speculation) for r in results]
    assert got == [("lru", False), ("lru", True), ("hot", False), ("hot", True)]
    assert all(r.summary.policy == "" and r.summary.expert_policy for r in results)


def test_stop_mid_round_ends_the_run_cleanly(small_moe):
    """The window's Stop: the decode ends at the next token, the summary says stopped, nothing raises."""
    def on_token(index, piece, dt):  # `run` is the test's own, opened below
        if index == 2:
            run.stop()

    with ExpertRun(_settings(small_moe, n_gen=20), on_token=on_token) as run:
        summary = run.run(continuous=True)
        assert run.stopping
    assert summary.stopped and summary.n_gen <= 4
