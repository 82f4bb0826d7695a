"""GUI responsiveness while streaming a model larger than the budget.

In one run: headless ``shardscope bench``-equivalent runs, and the real window running
the same settings with its charts live. Prints the GUI event-loop stall p99 (goal
≤ 50 ms), the chart refresh rate (goal ≥ 10 Hz) and tok/s with the GUI attached ÷
headless (goal ≥ 0.9).

It runs on a display server: an existing $DISPLAY, or an Xvfb it starts itself when the
binary is installed (``apt-get install xvfb``), with the window shown and Qt's own
event loop running; offscreen only as a fallback, and the output says which.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from bench.lib.virtual_display import start_display

DISPLAY_LINE = start_display()  # before Qt is imported: it picks its platform once

from bench.lib.bench_models import synthetic_model  # noqa: E402
from bench.lib.cold_cache import drop_from_cache  # noqa: E402
from bench.lib.fake_expert_views import FakeExpertViews  # noqa: E402
from bench.lib.gui_session import StallProbe, open_window, pump, stop  # noqa: E402
from bench.lib.headless_child import rounds_in_child  # noqa: E402
from shardscope.engine.knobs.settings import RunSettings  # noqa: E402

MIB = 1024 * 1024


def headless_tok_s(settings: RunSettings, rounds: int) -> float:
    """Mean avg_ts of the rounds after the first, in a child process (bench/lib/headless_child.py: run
    here, its OpenMP pool would slow the window's run that follows)."""
    kept = rounds_in_child(settings, rounds=rounds, streams="layers", drop_cache=True)
    steady = [r.avg_ts for r in kept[1:] if not r.stopped] or [kept[0].avg_ts]
    return statistics.mean(steady)


def gui_run(settings: RunSettings, rounds: int, expert_map: bool = False) -> dict:
    drop_from_cache(settings.model_path)
    app, window = open_window(settings.model_path, settings)
    if expert_map:  # Kimi-class 61 x 384, a new fake view every 100 ms: what the map costs the GUI
        views = FakeExpertViews()
        window.expert_panel.map.set_shape(*views.shape)
        window.expert_panel.view_source = views
        window.expert_panel.show()
    probe = StallProbe()
    refresh0 = window.chart.refresh_count
    window.start_run()
    pump(app, 120, until=lambda: window.last_sample is not None)
    probe.start()
    t0 = time.perf_counter()
    refresh_start, polls_start = window.chart.refresh_count, window.expert_panel.polls
    pump(app, 3600, until=lambda: len([s for s in window.summaries if not s.stopped]) >= rounds)
    elapsed = time.perf_counter() - t0
    refreshes = window.chart.refresh_count - refresh_start
    polls = window.expert_panel.polls - polls_start
    probe.stop()
    stop(app, window)
    done = [s for s in window.summaries if not s.stopped]
    steady = [s.avg_ts for s in done[1:]] or [done[0].avg_ts]
    window.close()
    return {"tok_s": statistics.mean(steady), "p99_ms": probe.p99(), "refresh_hz": refreshes / elapsed,
            "max_stall_ms": max(probe.stalls_ms, default=float("nan")), "first_refresh": refresh0,
            "map_hz": polls / elapsed}


def expert_map_case(settings: RunSettings, rounds: int) -> None:
    """The streaming window plus its expert column at 61 layers x 384 experts, fed a fake
    view that changes every 100 ms: it measures the map's cost to the GUI thread, not
    expert streaming (the run is the dense case's)."""
    gui = gui_run(settings, rounds, expert_map=True)
    print(f"expert map 61 x 384 (fake view, new every 100 ms): event-loop stall p99 {gui['p99_ms']:.1f} ms, "
          f"chart refresh {gui['refresh_hz']:.1f} Hz, map updates {gui['map_hz']:.1f} Hz, "
          f"stall max {gui['max_stall_ms']:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--expert-map", action="store_true",
                        help="only the expert-map case: the window with a 61 x 384 expert map")
    args = parser.parse_args()
    model = synthetic_model(args.size_mb)
    size_mb = os.path.getsize(model) / MIB
    settings = RunSettings(model_path=model, budget_mb=int(size_mb / 2), shard_mb=max(1.0, round(size_mb / 32, 1)),
                           prefetch_depth=2, policy="pinned", threads=args.threads, n_gen=args.tokens, n_ctx=128)
    if args.expert_map:
        return expert_map_case(settings, args.rounds)
    before = headless_tok_s(settings, args.rounds)
    gui = gui_run(settings, args.rounds)
    after = headless_tok_s(settings, args.rounds)
    headless = (before + after) / 2
    print(DISPLAY_LINE)
    print(f"model {Path(model).name} ({size_mb:.0f} MiB), budget {settings.budget_mb} MiB, shard "
          f"{settings.shard_mb} MiB, pinned, prefetch depth 2, n_threads {args.threads}, "
          f"{args.rounds} rounds of {args.tokens} tokens")
    print(f"headless {before:.2f} / {after:.2f} tok/s (before/after), GUI {gui['tok_s']:.2f} tok/s; "
          f"stall max {gui['max_stall_ms']:.0f} ms")
    print(f"GUI responsiveness: event-loop stall p99 {gui['p99_ms']:.1f} ms, chart refresh "
          f"{gui['refresh_hz']:.1f} Hz, tok/s ratio GUI/headless {gui['tok_s'] / headless:.2f}")


if __name__ == "__main__":
    main()
