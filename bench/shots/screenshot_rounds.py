"""Screenshot of the rounds table with a pinned baseline and its faint curves (issue 29).

    python -m bench.shots.screenshot_rounds --budget-mb 200 --out docs/img/rounds-baseline.png

Opens the window with a fresh config (the user's is never touched) on --model (default:
the bundled model), runs --rounds-before complete rounds at the first setting, changes one
knob live (--change key=value, e.g. prefetch_depth=0), runs until --rounds-after more rounds
ended, pins round 1 as the baseline, waits for the next round to start and to run --share of
round 1's length over its faint curves, then saves the window (on a virtual X screen when Xvfb is there, so the picture
is what a user sees) and prints the table's rows and the round panel's deltas.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="GGUF (default: the bundled model)")
    parser.add_argument("--out", default="rounds-baseline.png")
    parser.add_argument("--budget-mb", type=float, default=200)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ssd-mb-s", type=float, default=0.0, help="emulated disk (0: off)")
    parser.add_argument("--first", default="prefetch_depth=2", help="key=value of the first rounds")
    parser.add_argument("--change", default="prefetch_depth=0", help="key=value applied live after them")
    parser.add_argument("--rounds-before", type=int, default=2)
    parser.add_argument("--rounds-after", type=int, default=2)
    parser.add_argument("--share", type=float, default=0.75,
                        help="how far into the next round to take the picture, as a share of round 1's length")
    args = parser.parse_args()

    from bench.lib.virtual_display import start_display

    print(start_display())
    from bench.lib.gui_session import pump, window_for_screenshot

    app, window = window_for_screenshot(args.model, size=(1600, 1000))
    if window is None:
        return 1

    def knob(text: str) -> dict:
        key, value = text.split("=", 1)
        kind = type(getattr(window.current_settings(), key))
        return {key: kind(float(value)) if kind in (int, float) else kind(value)}

    window.apply_settings(window.current_settings().with_changes(
        n_gen=args.tokens, threads=args.threads, budget_mb=args.budget_mb, ssd_mb_s=args.ssd_mb_s,
        **knob(args.first)))
    window.start_run()
    pump(app, 600, until=lambda: len(window.rounds) >= args.rounds_before or window.last_error is not None)
    print(f"{len(window.rounds)} round(s) at {args.first}; now {args.change}", flush=True)
    window.apply_settings(window.current_settings().with_changes(**knob(args.change)))
    target = args.rounds_before + args.rounds_after
    pump(app, 600, until=lambda: len(window.rounds) >= target or window.last_error is not None)
    if window.last_error:
        print(f"error: {window.last_error}")
        return 1
    window.pin_baseline(1)
    window.rounds_table.select(1)
    started = time.perf_counter()
    n = len(window.rounds)
    pump(app, 600, until=lambda: len(window.rounds) > n or window.last_error is not None)  # a fresh round
    first = window.round_by_number(1)
    pump(app, args.share * (first.end_t - first.start_t))
    pump(app, 0.3)  # let the charts repaint what arrived
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(out))
    print(f"wrote {out} {time.perf_counter() - started:.1f} s after pinning round 1")
    t = window.rounds_table
    keys = ["round", "prefetch_depth", "threads", "budget_mb", "avg_ts", "cache_hit_rate", "read_mb_per_token",
            "projected_ts"]
    print("  ".join(keys))
    for rid in t.row_ids():
        print("  ".join(t.text(rid, k) for k in keys))
    print("round panel deltas vs round 1:",
          {k: window.round_numbers.delta(k) for k in window.round_numbers.keys()})
    window.stop_run()
    pump(app, 120, until=lambda: not window.is_running())
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
