"""The run chart at 0.01 tok/s and at 100 tok/s: steady lines, not spikes to zero.

The real sampler and chart, fed by a scripted run (a fake clock and controller): half
the layers of every token hit, half miss, tokens of equal length. Seconds, not minutes:
no model runs here.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from shardscope.app.run_view.charts import build_run_chart, sample_values
from shardscope.engine.measure import metrics
from shardscope.engine.measure.metrics import MetricsSampler, TokenClock

LAYERS = 10


class _ScriptedRun:
    """Counters as a run with ``token_s`` per token would have them at time ``now``."""

    def __init__(self, token_s: float):
        self.token_s = token_s
        self.now = 0.0
        self.clock = TokenClock()
        self.clock.phase = "generating"
        self.ssd_mb_s = 0.0

    def advance(self, now: float) -> None:
        self.now = now
        while (self.clock.n_tokens + 1) * self.token_s <= now:
            self.clock.record((self.clock.n_tokens + 1) * self.token_s, self.token_s)

    def snapshot(self):
        done, into = divmod(self.now / self.token_s, 1.0)
        layer = int(into * LAYERS)
        hits = int(done) * LAYERS // 2 + min(layer, LAYERS // 2)
        calls = int(done) * LAYERS + layer
        # Layers of equal size: the rates count bytes, one unit per layer here.
        counters = SimpleNamespace(cache_hits=hits, cache_misses=calls - hits, on_time=calls, stalls=0,
                                   needed_bytes=calls, hit_bytes=hits, on_time_bytes=calls)
        return SimpleNamespace(counters=counters, budget_bytes=0, resident_bytes=0, states=(),
                               current_layer_pos=None)


def _chart_run(qtbot, monkeypatch, token_s: float, seconds: float):
    run = _ScriptedRun(token_s)
    monkeypatch.setattr(metrics, "time", SimpleNamespace(perf_counter=lambda: run.now))
    sampler = MetricsSampler(run, None, run.clock, interval_s=0.1)
    chart = build_run_chart()
    qtbot.addWidget(chart)
    sampler.subscribe(lambda s: chart.append(s.t_s, sample_values(s)))
    for i in range(1, int(seconds / 0.1) + 1):
        run.advance(i * 0.1)
        sampler.sample()
    return chart


@pytest.mark.parametrize("token_s, seconds", [(100.0, 500.0), (0.01, 5.0)])  # 0.01 tok/s and 100 tok/s
def test_tok_s_and_hit_rate_read_as_steady_lines(qtbot, monkeypatch, token_s, seconds):
    chart = _chart_run(qtbot, monkeypatch, token_s, seconds)
    t, toks = chart.curve_data("toks")
    after_first = toks[t > token_s * 1.01]
    assert after_first.size and not np.isnan(after_first).any(), "a rate once there stays there"
    assert np.all(after_first > 0), "never 0 while a token is in flight"
    assert np.allclose(after_first, 1 / token_s, rtol=0.05)
    t, hit = chart.curve_data("hit")
    steady = hit[t > 2 * token_s + 1.0]
    assert steady.size and np.allclose(steady, 50.0, atol=10), "per token, not 0 % then 100 %"
    if token_s > 0.1:
        assert math.isnan(toks[0])  # before the first token: a gap, not a zero
