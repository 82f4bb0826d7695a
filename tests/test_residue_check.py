"""The expert streamer's residue check (mincore over dropped experts' own pages, the run's
``evict_residue_mb``) runs once a token over the victims still out, not once a layer: each mincore
takes the mapping lock every read's page pins wait on, on the decode thread while a layer's reads run.

Checked from outside the check: at each call the units it looks at are out of the cache and not
loading, it is called at most once a decoded token, and what it counted agrees with mincore over the
same units read by the test (engine/base/memory_calls.py, not the streamer's books)."""

from __future__ import annotations

import pytest

from shardscope.engine.base import memory_calls
from shardscope.engine.experts.expert_io import ExpertIO
from shardscope.engine.experts.expert_run import ExpertRun
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout import budget_minimum as bm

N_GEN = 10


@pytest.fixture(scope="module")
def kimi_file(tmp_path_factory) -> str:
    from shardscope.engine.cli.cli import main

    path = tmp_path_factory.mktemp("residue") / "kimi-k3.gguf"
    assert main(["synth", "--moe", "--arch", "kimi-k3", "--size-mb", "48", "--layers", "8", "--experts", "256",
                 "--experts-used", "16", "--out", str(path), "--quiet"]) == 0
    return str(path)


def test_the_residue_check_runs_once_a_token_over_victims_still_out(kimi_file, monkeypatch):
    settings = RunSettings(model_path=kimi_file, n_gen=N_GEN, n_ctx=128, threads=2, shard_mb=1)
    settings = settings.with_changes(budget_mb=bm.minimum_for(settings).mb + 1)
    calls: list[int] = []
    checked: set = set()
    original = ExpertIO.units_resident_bytes

    def spy(io, units):
        streamer = run.streamer
        for unit in units:
            assert unit not in streamer.cache.resident and unit not in streamer._in_flight, unit
        checked.update(units)
        found = original(io, units)
        spans = [p.span for u in units for p in io._unit_slices(*u) if p.span]
        assert found == sum(memory_calls.resident_bytes(lo, hi) for lo, hi in spans)
        calls.append(streamer.in_prompt)
        return found

    monkeypatch.setattr(ExpertIO, "units_resident_bytes", spy)
    with ExpertRun(settings) as run:
        summary = run.run()
        evictions = run.streamer.snapshot_counters().evictions
    assert evictions > 0 and checked, (evictions, calls)
    # once a decoded token (each reaches the first MoE layer once; a prompt in micro-batches once a batch),
    # not once a layer
    decoded = [c for c in calls if not c]
    assert 0 < len(decoded) <= N_GEN, calls
    assert summary.evict_residue_mb == 0
