"""Screenshot of the window streaming a synthetic 64-expert MoE: expert map, expert charts,
cacheability curve. Runs on a virtual X screen (Xvfb) so the picture is what a user sees.

    python -m bench.shots.screenshot_moe --out /tmp/moe-window/screenshot-moe.png

Writes the model once under --dir (about --size-mb), runs it at a budget of the dense
weights plus --cache-share of the experts, lets it stream for --seconds, replays the
session's routing into the cacheability curve, then saves the window as a PNG.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

MIB = 1024 * 1024


def start_display() -> str:
    """bench/lib/virtual_display.py where it has landed; else the same idea in a few lines."""
    try:
        from bench.lib.virtual_display import start_display as start
    except ImportError:
        start = _own_xvfb
    return start()


def _own_xvfb() -> str:
    import atexit
    import shutil
    import subprocess

    if os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "xcb")
        return f"display {os.environ['DISPLAY']}"
    xvfb = shutil.which("Xvfb")
    for n in range(90, 100) if xvfb else ():
        if Path(f"/tmp/.X11-unix/X{n}").exists() or Path(f"/tmp/.X{n}-lock").exists():
            continue
        proc = subprocess.Popen([xvfb, f":{n}", "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(proc.terminate)
        for _ in range(100):
            if Path(f"/tmp/.X11-unix/X{n}").exists():
                os.environ["DISPLAY"], os.environ["QT_QPA_PLATFORM"] = f":{n}", "xcb"
                return f"display :{n} (Xvfb)"
            time.sleep(0.05)
        proc.terminate()
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    return "offscreen (no Xvfb)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="screenshot-moe.png")
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "shardscope-screenshot"))
    parser.add_argument("--size-mb", type=int, default=150)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--used", type=int, default=8)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--cache-share", type=float, default=0.5, help="share of the experts the cache holds")
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--like", choices=("", "kimi-k2"), default="",
                        help="kimi-k2: the Kimi K2 shape (deepseek2: 384 experts top-8 + 1 shared, first layer dense)")
    args = parser.parse_args()
    print(start_display())

    from bench.lib.gui_session import pump, window_for_screenshot
    from shardscope.engine.layout.gguf_layout import read_layout
    from shardscope.engine.layout.moe_layout import read_moe_layout
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec, like_kimi_k2

    if args.like == "kimi-k2":
        spec = like_kimi_k2(routing_skew=2.0)
        model = Path(args.dir) / f"kimi-k2-shape-{args.layers}l-{args.size_mb}mb.gguf"
    else:
        spec = MoeSpec(args.experts, args.used, routing_skew=2.0)
        model = Path(args.dir) / f"moe-{args.layers}x{args.experts}x{args.used}-{args.size_mb}mb.gguf"
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        write_synthetic_model(model, args.size_mb, n_layers=args.layers, moe=spec, seed=11)
    moe = read_moe_layout(read_layout(model))
    budget = int((moe.dense_bytes + args.cache_share * moe.expert_bytes) / MIB) + 1

    app, window = window_for_screenshot(str(model))
    if window is None:
        return 1
    window.apply_settings(window.current_settings().with_changes(
        budget_mb=budget, ssd_mb_s=0.0, n_gen=24, n_ctx=128, threads=2, expert_policy="lru"))
    window.start_run()
    t0 = time.perf_counter()
    pump(app, 120, until=lambda: window.last_error is not None or (
        window.last_round is not None and time.perf_counter() - t0 > args.seconds))
    if window.last_error:
        print(f"error: {window.last_error}")
    window.expert_panel.compute_button.click()
    pump(app, 60, until=lambda: window.expert_panel.result is not None)
    pump(app, 3)  # the map keeps moving; let the charts and plot repaint
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(out))
    s, r = window.last_sample, window.last_round
    print(f"model {model.name}: {len(moe.layers)} layers x {moe.n_expert} experts, top-{moe.n_expert_used}, "
          f"budget {budget} MB (dense {moe.dense_bytes / MIB:.0f} MB + {args.cache_share:.0%} of "
          f"{moe.expert_bytes / MIB:.0f} MB experts)")
    if s is not None:
        print(f"last sample: weights resident {s.resident_weights_mb:.0f} MB, budget {s.budget_mb:.0f} MB, "
              f"expert hit rate {s.expert_hit_rate:.2f}")
    if r is not None:
        print(f"last round: {r.avg_ts:.2f} tok/s, expert hit rate {getattr(r, 'expert_hit_rate', float('nan')):.2f}")
    print(f"wrote {out}")
    window.stop_run()
    pump(app, 30, until=lambda: not window.is_running())
    window.close()
    return 0 if window.last_error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
