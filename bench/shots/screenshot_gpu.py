"""The window on a GPU host: an MoE run streaming its experts, the GPU slider moved from 0 to all layers.

    QT_QPA_PLATFORM=offscreen python -m bench.shots.screenshot_gpu --model /tmp/moe24.gguf --budget-mb 1900 \
        --out-dir docs/img

Starts a run at n_gpu_layers 0 (experts streamed at --budget-mb), saves the window once a round
is done (gpu-window-cpu.png), then moves the GPU slider to its top (every layer and the output
head; the run restarts, as for any n_gpu_layers change) and saves the window again once a round
at that setting is done (gpu-window-split.png): the memory chart's GPU line and the Live panel's
GPU memory show what moved there. Prints each round's tok/s, n_gpu_layers and GPU memory.
On a build without GPU offload the slider is disabled (its readout says why) and both rounds
run on the CPU.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--budget-mb", type=int, required=True)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0, help="streaming time before each picture")
    parser.add_argument("--out-dir", default="docs/img")
    args = parser.parse_args()

    from bench.shots.screenshot_moe import start_display
    print(start_display())
    from bench.lib.gui_session import pump, window_for_screenshot

    app, window = window_for_screenshot(args.model)
    if window is None:
        return 1
    top = window.model_info.n_layers + 1  # the slider's top: every layer and the output head
    window.apply_settings(window.current_settings().with_changes(
        budget_mb=args.budget_mb, ssd_mb_s=0.0, n_gen=32, n_ctx=256, threads=args.threads, n_gpu_layers=0))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    def picture(name: str, requested: int) -> None:
        t0 = time.perf_counter()
        pump(app, 240, until=lambda: window.last_error is not None or (
            window.last_round is not None and window.last_round.n_gpu_layers_requested == requested
            and time.perf_counter() - t0 > args.seconds))
        pump(app, 1)
        window.grab().save(str(out / name))
        r, s = window.last_round, window.last_sample
        if window.last_error:
            print(f"error: {window.last_error}")
        if r is not None:
            print(f"{name}: n_gpu_layers {r.n_gpu_layers} (asked {r.n_gpu_layers_requested}), {r.avg_ts:.2f} tok/s, "
                  f"TTFT {r.ttft_ms:.0f} ms, read {r.read_mb_per_token:.2f} MiB/token, host weights "
                  f"{r.resident_weights_mb:.0f} MiB of {args.budget_mb}, GPU {r.gpu_mb:.0f} MiB, expert hit rate "
                  f"{getattr(r, 'expert_hit_rate', float('nan')):.3f}; last sample GPU "
                  f"{s.gpu_mb if s else float('nan'):.0f} MiB")
        slider = window.controls.sliders["n_gpu_layers"]
        print(f"  GPU slider: enabled {slider.slider.isEnabled()}, readout {slider.readout()!r}, "
              f"tooltip: {slider.toolTip()[:100]!r}")

    window.start_run()
    picture("gpu-window-cpu.png", 0)
    # What the slider does when a user drags it to the top while the run goes on (main_window._on_edited).
    window.apply_settings(window.current_settings().with_changes(n_gpu_layers=top))
    picture("gpu-window-split.png", top)
    window.stop_run()
    pump(app, 30, until=lambda: not window.is_running())
    window.close()
    return 0 if window.last_error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
