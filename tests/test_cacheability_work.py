"""Issue 48, item 8: cacheability as long work. The replay reports progress (one step per policy
and size) with an ETA, Cancel ends its process at once, it replays the cache size in use (the
plot's note is at that size), it runs at the idle scheduling class, and opening another model
clears its curves.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from conftest import make_window
from shardscope.app.base.background import Cancelled
from shardscope.app.experts import cacheability_curve as cc
from shardscope.app.experts.expert_panel import ExpertPanel
from shardscope.engine.base.units import MIB
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord


def _trace(tokens: int = 400, n_expert: int = 64, k: int = 4, layers: int = 4) -> RoutingTrace:
    header = TraceHeader("made.gguf", n_expert, k, {layer: MIB // 4 for layer in range(layers)})
    records = [TraceRecord(t, layer, tuple(sorted({(t * 7 + layer * 3 + j * 11) % n_expert for j in range(k)})))
               for t in range(tokens) for layer in range(layers)]
    return RoutingTrace(header, tuple(records))


def _file(tmp_path, trace: RoutingTrace):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(trace.header.to_json())] + [json.dumps(r.to_json()) for r in trace.records])
                    + "\n")
    return str(path)


def test_progress_reaches_one_and_the_size_in_use_is_replayed() -> None:
    seen: list[float] = []
    result = cc.compute(_trace(), at_mb=(9.0,), progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert len(seen) == len(result.sizes_mb) * len(result.curves)  # one step per (policy, size)
    assert 9.0 in result.sizes_mb and all(9.0 in dict(pts) for pts in result.curves.values())


def test_eta_text() -> None:
    assert cc.eta_text(0.0, 10) == "0 %"
    assert cc.eta_text(0.5, 30) == "50 % \u2014 about 30 s left"
    assert cc.eta_text(0.25, 60) == "25 % \u2014 about 3 min 00 s left"


def test_cancel_ends_the_replay_process_at_once(tmp_path) -> None:
    source = _file(tmp_path, _trace(tokens=3000, n_expert=128, k=8, layers=8))  # long enough to be cut short
    calls = []

    def progress(fraction: float) -> None:
        calls.append(fraction)
        if len(calls) >= 3:
            raise Cancelled()

    start = time.monotonic()
    with pytest.raises(Cancelled):
        cc.compute_in_process(source, progress=progress, poll_s=0.05)
    assert time.monotonic() - start < 30
    assert not [p for p in multiprocessing.active_children() if p.is_alive()]


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE on this OS: nice 19 instead")
def test_the_replay_runs_at_the_idle_class(tmp_path) -> None:
    """Read from the kernel (/proc/<pid>/stat policy), not from the code that set it."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_report_policy, args=(child,))
    process.start()
    policy = parent.recv()
    process.join(10)
    assert policy == os.SCHED_IDLE


def _report_policy(conn) -> None:
    cc._idle_priority()
    with open(f"/proc/{os.getpid()}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    conn.send(int(fields[38]))  # field 41, policy (3 fields before it are pid, comm, state)
    conn.close()


def test_the_panel_shows_progress_and_cancel_while_it_replays(qtbot, tmp_path) -> None:
    source = _file(tmp_path, _trace(tokens=3000, n_expert=128, k=8, layers=8))
    panel = ExpertPanel()
    qtbot.addWidget(panel)
    panel.resize(420, 520)
    panel.show()
    panel.compute_from_file(source)
    qtbot.waitUntil(lambda: "%" in panel.status.text(), timeout=60_000)  # hang bound
    assert panel.cancel_button.isVisible() and panel.progress.isVisible()
    assert panel.status.text().startswith(f"replaying {source}: ")
    panel.cancel_replay()
    qtbot.waitUntil(lambda: not panel.task.isRunning(), timeout=15_000)
    qtbot.waitUntil(lambda: panel.status.text().startswith("replay cancelled"), timeout=30_000)  # hang bound
    assert not panel.cancel_button.isVisible() and panel.compute_button.isEnabled()


def test_another_model_clears_the_curves(qtbot, tmp_path) -> None:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    moe = tmp_path / "moe.gguf"
    write_synthetic_model(moe, 60, n_layers=4, moe=MoeSpec(16, 2))
    window = make_window(qtbot, tmp_path / "config", model_path=str(moe))
    try:
        panel = window.expert_panel
        with qtbot.waitSignal(panel.computed, timeout=60_000):
            panel.compute_from_file(_file(tmp_path, _trace()))
        assert panel.plot.curves() and panel.routing_stats.text()
        window.open_model(None)  # the bundled model
        qtbot.waitUntil(lambda: window.model_info.moe is None, timeout=30_000)
        assert panel.plot.curves() == {} and panel.result is None
        assert panel.routing_stats.text() == "" and panel.plot.legend_names() == []
    finally:
        window.close()


def test_the_curves_projection_keeps_the_rounds_compute_estimate() -> None:
    """The projected tok/s on the curve is the round's own projection with only its reads changed:
    dataclasses.replace dropped the run's robust compute estimate (an attribute beside the fields),
    and the curve read 2 tok/s beside the round's 154 for the same device (seen under Xvfb)."""
    import copy
    import dataclasses

    from shardscope.engine.devices.projection import moe_ssd_bytes_per_token
    from shardscope.engine.devices.run_projection import projection_for
    from shardscope.engine.experts.expert_run import ExpertRunSummary

    filled = {f.name: "" if f.type in (str, "str") else 0 for f in dataclasses.fields(ExpertRunSummary)
              if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    s = ExpertRunSummary(**{**filled, **dict(
        avg_ts=2.0, read_mb_per_token=1.6, model_size_mb=250.0, n_expert=128, n_expert_used=8, globals_mb=17.0,
        n_layers=5, n_threads=2, prefetch_depth=0, wait_ms_per_token=20.0, dense_mb_per_token=0.0)})
    s.compute_s_estimate = 0.004  # the run's robust per-token compute: far below 1 / avg_ts
    used = 8 * 233 / 128
    (size, tok_s), = cc.projected_points(s, [(73.0, 0.9)], used, "iphone-16-pro")
    same = copy.copy(s)
    same.read_mb_per_token = moe_ssd_bytes_per_token(0.0, used * MIB, 0.9) / MIB
    assert tok_s == pytest.approx(projection_for(same, "iphone-16-pro").tokens_per_s)
    assert tok_s > 10  # not this host's 1 / avg_ts = 2 tok/s
