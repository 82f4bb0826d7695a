"""What the window costs the run it measures, steady state, by rotation in the same minutes.

One window stays open for the whole bench; in each round, in turns (the order reversed every
other round, so a drifting host hits all three alike), the same settings run for ``--seconds``:

- **shown**: the window's own run, window visible (charts, expert map, tables drawn);
- **hidden**: the window's own run, window hidden (its run plumbing, timers and polls only);
- **headless**: a headless child process (bench/lib/headless_child.py), as ``shardscope bench``.

Prints each period's decode tok/s and each round's shown ÷ headless (first rounds against last:
does the cost grow with the session?), then the means and shown ÷ headless, hidden ÷ headless,
shown ÷ hidden. Single periods on a noisy VM swing ±15 %; the means over rounds are what
``bench/goals/gui_session_drift.py``'s first and last minutes can land either side of
(docs/decisions.md, issue 32). Default: the MoE synth of gui_session_drift at half its size.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
from pathlib import Path

from bench.lib.virtual_display import start_display

DISPLAY_LINE = start_display()  # before Qt is imported: it picks its platform once

from bench.lib.bench_models import bundled_model  # noqa: E402
from bench.lib.drift_cases import checked, dense_settings, moe_model, moe_settings  # noqa: E402
from bench.lib.gui_session import open_window, pump, stop  # noqa: E402
from bench.lib.headless_child import decode_rate, rounds_in_child, row_of  # noqa: E402

MODES = ("shown", "hidden", "headless")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4, help="rotations of the three modes")
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each period")
    parser.add_argument("--case", choices=("moe", "dense"), default="moe",
                        help="gui_session_drift's case: its MoE settings or its dense ones")
    parser.add_argument("--model", default=None,
                        help="a GGUF of your own (else the 240 MB qwen3moe synth, or the bundled gemma for dense)")
    parser.add_argument("--budget-share", type=float, default=0.5, help="MoE: budget as a share of the file's size")
    parser.add_argument("--budget-mb", type=int, default=None, help="dense: the budget (default 215)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.model is not None and not os.path.isfile(args.model):
        parser.exit(2, f"--model {args.model}: no such file\n")
    if not 0 < args.budget_share <= 2:
        parser.exit(2, f"--budget-share {args.budget_share}: must be above 0 (and at most 2)\n")
    if args.rounds < 1 or not args.seconds >= 10:
        parser.exit(2, "--rounds must be at least 1 and --seconds at least 10\n")
    if args.case == "dense":
        model = args.model or bundled_model()
        settings = checked(dense_settings(model, args.budget_mb, args.threads), "window_cost")
    else:
        model = args.model or moe_model(240)
        settings = checked(moe_settings(model, args.budget_share, args.threads), "window_cost")
    print(DISPLAY_LINE, f"cores {os.cpu_count()};", Path(model).name, f"budget {settings.budget_mb} MiB", flush=True)
    interrupted: list[bool] = []
    signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))  # Qt's loop would swallow it
    app, window = open_window(model, settings)
    window.resize(1600, 1000)
    ended: list = []
    window.runs.summary.connect(lambda s, _shown: ended.append(row_of(s)))

    def in_window(shown: bool) -> float:
        window.show() if shown else window.hide()
        ended.clear()
        window.start_run()
        pump(app, 300, until=lambda: window.last_sample is not None or not window.is_running() or bool(interrupted))
        pump(app, args.seconds, until=lambda: not window.is_running() or bool(interrupted))
        if window.last_error:  # the run failed: no figure to print, say why in one line
            message = window.last_error
            stop(app, window)
            window.close()
            parser.exit(2, f"window_cost: the window's run failed: {message}\n")
        stop(app, window)
        window.show()
        return decode_rate(list(ended))  # the load's first round left out

    rates: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in (MODES if r % 2 == 0 else MODES[::-1]):
            try:
                rate = decode_rate(rounds_in_child(settings, seconds=args.seconds)) if mode == "headless" \
                    else in_window(mode == "shown")
            except SystemExit:  # the child, which got the Ctrl-C too
                if not interrupted:
                    raise
            if interrupted:
                window.close()
                parser.exit(130, "window_cost: interrupted; nothing printed for the periods under way\n")
            rates[mode].append(rate)
            print(f"  round {r + 1} {mode:8s} {rate:7.1f} tok/s", flush=True)
        # the round's own ratio, its three periods in the same two minutes: the first rounds
        # against the last say whether the window's cost grows with the session (its rounds,
        # samples and marks pile up across the periods; the host's drift hits all three alike)
        print(f"  round {r + 1} shown/headless {rates['shown'][-1] / rates['headless'][-1]:.3f}, "
              f"session {window.runs.complete_rounds()} rounds", flush=True)
    window.close()
    mean = {m: statistics.mean(v) for m, v in rates.items()}
    print("  means: " + ", ".join(f"{m} {mean[m]:.1f}" for m in MODES))
    print(f"  shown/headless {mean['shown'] / mean['headless']:.3f}, hidden/headless "
          f"{mean['hidden'] / mean['headless']:.3f}, shown/hidden {mean['shown'] / mean['hidden']:.3f}")


if __name__ == "__main__":
    main()
