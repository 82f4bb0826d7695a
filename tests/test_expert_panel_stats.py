"""The expert panel shows the routing statistics of the trace it replays (the same figures as
``shardscope trace-stats``), next to the cacheability curve."""

from __future__ import annotations

import json

from shardscope.app.experts.expert_panel import ExpertPanel
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord


def _trace_file(tmp_path):
    """8 experts top-2, 10 tokens: layer 0 always {0, 1}; layer 1 {t mod 8, t+1 mod 8} (lag-1 50 %)."""
    header = TraceHeader("hand.gguf", 8, 2, {0: 4096, 1: 4096})
    records = [TraceRecord(t, layer, (0, 1) if layer == 0 else (t % 8, (t + 1) % 8))
               for t in range(10) for layer in (0, 1)]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(header.to_json())] + [json.dumps(r.to_json()) for r in records]) + "\n")
    return RoutingTrace(header, tuple(records)), path


def test_panel_shows_the_replayed_traces_statistics(qtbot, tmp_path):
    trace, path = _trace_file(tmp_path)
    panel = ExpertPanel()
    qtbot.addWidget(panel)
    panel.resize(420, 520)
    panel.show()
    assert panel.routing_stats.text() == ""
    with qtbot.waitSignal(panel.computed, timeout=60_000):
        panel.compute_from_file(str(path))
    text = panel.routing_stats.text()
    assert "10 decoded tokens" in text and "lag-1 reuse 75.0 %" in text and "lag-8 100.0 %" in text
    assert "static top-2 67.5 %" in text and "distinct 5 of 8" in text
    panel.grab().save(str(tmp_path / "panel.png"))
    panel.records_source = lambda: trace  # the session's trace: same figures
    panel.routing_stats.setText("")
    with qtbot.waitSignal(panel.computed, timeout=60_000):
        panel.compute_from_session()
    assert panel.routing_stats.text() == text
    panel.close_tasks(5000)
