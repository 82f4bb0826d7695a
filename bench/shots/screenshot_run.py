"""Screenshot of the window N seconds after Run on a given model: the load's progress in the
status bar and the charts filling from t = 0 (issue 20). On a virtual X screen (Xvfb), so
the picture is what a user sees.

    python -m bench.shots.screenshot_run --model big.gguf --budget-mb 2048 --seconds 20 --out load.png

Opens the window on --model with a fresh config (the user's is never touched), sets the
knobs given, presses Run, waits --seconds (or until the run fails), saves the window and
prints what the status bar and the newest sample said at that moment; then presses Stop
and reports how long the window took to go idle. Repeat --seconds (e.g. 20,60) for a
series of pictures from one run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", default="screenshot-run.png", help="PNG; with several --seconds, -<s>s is added")
    parser.add_argument("--seconds", default="20", help="after Run, e.g. 20 or 10,40,90")
    parser.add_argument("--budget-mb", type=float, default=None)
    parser.add_argument("--ssd-mb-s", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", default=None, help="a device profile to load first (e.g. the iPhone one)")
    args = parser.parse_args()
    times = sorted(float(x) for x in args.seconds.split(","))

    from bench.lib.virtual_display import start_display

    print(start_display())
    from bench.lib.gui_session import pump, window_for_screenshot

    app, window = window_for_screenshot(args.model, profile=args.profile)
    if window is None:
        return 1
    changes = dict(n_gen=args.tokens, threads=args.threads, ssd_mb_s=args.ssd_mb_s)
    if args.budget_mb is not None:
        changes["budget_mb"] = args.budget_mb
    window.apply_settings(window.current_settings().with_changes(**changes))
    window.start_run()
    t0 = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for at in times:
        pump(app, max(0.0, at - (time.perf_counter() - t0)), until=lambda: window.last_error is not None)
        pump(app, 0.3)  # let the charts repaint what arrived
        path = out if len(times) == 1 else out.with_name(f"{out.stem}-{at:g}s{out.suffix}")
        window.grab().save(str(path))
        s, p = window.last_sample, window.phase_progress.shown
        print(f"{time.perf_counter() - t0:6.1f} s: wrote {path}")
        print(f"   status bar: {window.statusBar().currentMessage()!r}; progress: "
              f"{window.phase_progress.label.text() if window.phase_progress.isVisible() else 'hidden'}")
        if s is not None:
            print(f"   newest sample: phase {s.phase}, RSS {s.rss_mb:.0f} MB, weights {s.resident_weights_mb:.0f} MB, "
                  f"read {s.read_mb_total:.0f} MB, SSD {s.ssd_mb_s:.0f} MB/s; chart points "
                  f"{window.chart.point_count('rss')}; spans {[n for n, _, _ in window.phase_bands.spans()]}")
        if p is not None:
            print(f"   progress: {p.phase} {p.fraction:.3f}, layer {p.layer}, eta {p.eta_s:.1f} s")
        if window.last_error:
            print(f"error: {window.last_error}")
            break
    pressed = time.perf_counter()
    window.stop_run()
    pump(app, 120, until=lambda: not window.is_running())
    print(f"Stop -> idle in {time.perf_counter() - pressed:.2f} s")
    window.close()
    return 0 if window.last_error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
