"""The window says so when the kernel keeps weights resident above the budget.

Found while looking at the window: a second process mapping the same GGUF makes
the kernel keep every shared page (no eviction call can drop it), so "streaming"
reads nothing from disk.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

from shardscope.app.runs.overbudget_watch import OverBudgetWatch
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.measure.metrics import MetricsSample


def sample(t: float, weights: float, accounted: float = 190.0, budget: float = 200.0,
           phase: str = "generating") -> MetricsSample:
    return MetricsSample(t_s=t, rss_mb=weights + 100, resident_weights_mb=weights, other_rss_mb=100,
                         ssd_mb_s=0.0, read_mb_total=0.0, cache_hit_rate=math.nan, on_time_rate=math.nan, tok_s=1.0,
                         n_tokens=1,
                         budget_mb=budget, accounted_weights_mb=accounted, cache_hits=0, cache_misses=0, on_time=0,
                         stalls=0, phase=phase)


def test_watch_reports_a_lasting_excess_once_and_ignores_blips():
    watch = OverBudgetWatch(slack_mb=32, hold_s=3.0)
    assert watch.check(sample(0.0, 320)) is None  # just started
    assert watch.check(sample(1.0, 220)) is None  # back under budget + slack: resets
    assert watch.check(sample(2.0, 320)) is None
    assert watch.check(sample(3.0, 320, phase="prompt")) is None  # next round: same episode
    assert watch.check(sample(3.5, 600, phase="loading")) is None  # neither counts nor resets
    assert watch.check(sample(4.9, 320)) is None  # 2.9 s over
    message = watch.check(sample(5.1, 320))
    assert message and "320 MiB" in message and "200 MiB budget" in message and "another process" in message
    assert watch.check(sample(9.0, 320)) is None  # once per episode
    assert watch.check(sample(9.5, 210)) is None  # episode ends
    assert watch.check(sample(10.0, 320)) is None and watch.check(sample(13.1, 320))  # a new one
    # The controller itself over budget (budget just lowered) is not this problem.
    watch.reset()
    assert all(watch.check(sample(t, 320, accounted=320)) is None for t in range(10))


HOLDER = textwrap.dedent("""
    import mmap, sys, time
    f = open(sys.argv[1], "rb")
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    total = sum(m[i] for i in range(0, len(m), 4096))  # fault every page into this process
    print("mapped", flush=True)
    time.sleep(120)
""")


def test_window_warns_while_another_process_maps_the_model(qtbot, tmp_path, synthetic_model):
    from shardscope.app.window.main_window import MainWindow

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, synthetic_model], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "mapped"
        window = MainWindow(config_dir=tmp_path / "config", model_path=synthetic_model)
        qtbot.addWidget(window)
        window.show()
        qtbot.waitUntil(lambda: window.model_info is not None, timeout=20_000)
        window.apply_settings(RunSettings(budget_mb=200, shard_mb=32, prefetch_depth=1, n_gen=32))
        window.start_run()
        qtbot.waitUntil(lambda: window.warning is not None, timeout=30_000)
        assert "another process" in window.warning
        assert window.warning_label.isVisible()
        assert window.last_sample.resident_weights_mb > 250  # the kernel's view: still all there
        window.close()
    finally:
        holder.terminate()  # by its own handle: only the process this test started
        holder.wait(10)
