"""Does the window slow the run it measures as the session goes on?

For each case (a dense model and an MoE file, both below their size in budget) in one
run of this script: headless continuous rounds for ``--headless-s`` seconds, then the
real window (offscreen unless a display is there) running the same settings
continuously for ``--minutes``, then headless again. The headless runs are child
processes, as a user's ``shardscope bench`` is (bench/headless_child.py says why). Printed
per case:

- window ÷ headless for the first and the last minute of the window session (the
  headless figure is the mean of the runs just before and just after the session, so
  a disk or host that drifts over the minutes hits both sides alike);
- last minute ÷ first minute of the window;
- rounds per minute, the GUI event loop's stall p99, and RSS growth (the mean of the
  last minute against the mean of the second minute: weights come and go under the
  budget, so single samples swing by a shard).

tok/s of a minute is the decoded tokens of the rounds that ended in it over their
decode seconds (n_gen / avg_ts each), i.e. decode speed, as the rounds table shows it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil  # noqa: E402

from bench.virtual_display import start_display  # noqa: E402

DISPLAY_LINE = start_display()  # before Qt is imported: it picks its platform once

from bench.bench_models import bundled_model  # noqa: E402
from bench.gui_session import StallProbe, open_window, pump, stop  # noqa: E402
from bench.headless_child import decode_rate, rounds_in_child  # noqa: E402
from shardscope.engine.base.user_dirs import cache_dir  # noqa: E402
from shardscope.engine.knobs.settings import RunSettings  # noqa: E402

MIB = 1024 * 1024


def moe_model(size_mb: int) -> str:
    """A qwen3moe synth at Q4_K_M (the class the issue reported on), written once into the cache."""
    path = cache_dir() / "bench" / f"drift-qwen3moe-q4km-{size_mb}mb.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(Path(sys.executable).with_name("shardscope")), "synth", "--moe", "--arch", "qwen3moe",
                        "--quant", "q4_k_m", "--size-mb", str(size_mb), "--out", str(path)], check=True)
    return str(path)


def headless(case: str, settings: RunSettings, seconds: float) -> float:
    """Continuous rounds for ``seconds`` in a child process (bench/headless_child.py)."""
    return decode_rate(rounds_in_child(settings, seconds=seconds))


def window_session(settings: RunSettings, minutes: float, shots: Path | None = None, name: str = "") -> dict:
    app, window = open_window(settings.model_path, settings)
    window.resize(1600, 1000)
    proc = psutil.Process()
    ended: list[tuple[float, object]] = []  # (seconds into the session, summary)
    rss: list[tuple[float, float]] = []
    probe = StallProbe()
    window.start_run()
    pump(app, 300, until=lambda: window.last_sample is not None)
    t0 = time.perf_counter()
    window.runs.summary.connect(lambda s, _shown: ended.append((time.perf_counter() - t0, s)))
    probe.start()
    while (now := time.perf_counter() - t0) < minutes * 60:
        pump(app, 2.0)
        rss.append((now, proc.memory_info().rss / MIB))
        if not window.is_running():
            print(f"  the run ended by itself: {window.last_error}")
            break
    probe.stop()
    if shots is not None:  # what the user sees after the session, at both window sizes
        shots.mkdir(parents=True, exist_ok=True)
        for w, h in ((1600, 1000), (1280, 800)):
            window.resize(w, h)
            pump(app, 3.0)
            path = shots / f"session-{name}-{w}x{h}.png"
            window.grab().save(str(path))
            print(f"  screenshot {path}")
    stop(app, window)
    window.close()
    span = min(minutes * 60, time.perf_counter() - t0)
    first = decode_rate([s for t, s in ended if t <= 60.0])  # its first round (the load) left out
    last = decode_rate([s for t, s in ended if t > span - 60.0], skip_first=False)
    second_minute = [r for t, r in rss if 60.0 < t <= 120.0] or [r for _, r in rss[: len(rss) // 2]]
    last_minute = [r for t, r in rss if t > span - 60.0]
    return {"first": first, "last": last, "rounds": len(ended), "minutes": span / 60, "p99_ms": probe.p99(),
            "rss_from": statistics.mean(second_minute), "rss_to": statistics.mean(last_minute),
            "rss_peak": max(r for _, r in rss)}


def run_case(name: str, settings: RunSettings, args: argparse.Namespace) -> None:
    minutes, headless_s, shots = args.minutes, args.headless_s, args.shots
    print(f"== {name}: {Path(settings.model_path).name}, budget {settings.budget_mb} MiB, "
          f"{settings.threads} threads, {settings.n_gen} tokens a round", flush=True)
    before = headless(name, settings, headless_s)
    print(f"  headless before: {before:.2f} tok/s", flush=True)
    w = window_session(settings, minutes, shots, name)
    after = headless(name, settings, headless_s)
    print(f"  headless after:  {after:.2f} tok/s", flush=True)
    ref = (before + after) / 2
    if max(before, after) > 1.25 * min(before, after):
        print(f"  note: headless before and after differ by more than 25 % ({before:.2f} vs {after:.2f}): "
              f"the machine changed during the case; ratios to each: first minute {w['first'] / before:.2f} / "
              f"{w['first'] / after:.2f}, last minute {w['last'] / before:.2f} / {w['last'] / after:.2f}")
    growth = 100.0 * (w["rss_to"] - w["rss_from"]) / w["rss_from"]
    print(f"  window first minute {w['first']:.2f} tok/s, last minute {w['last']:.2f} tok/s "
          f"over {w['minutes']:.1f} min, {w['rounds'] / w['minutes']:.1f} rounds/min")
    print(f"  {name}: window/headless first minute {w['first'] / ref:.2f}, last minute {w['last'] / ref:.2f}; "
          f"last/first minute {w['last'] / w['first']:.2f}; GUI stall p99 {w['p99_ms']:.0f} ms; "
          f"RSS {w['rss_from']:.0f} -> {w['rss_to']:.0f} MiB ({growth:+.1f} %, peak {w['rss_peak']:.0f})",
          flush=True)


def case_settings(case: str, args: argparse.Namespace) -> RunSettings:
    if case == "dense":
        return RunSettings(model_path=bundled_model(), budget_mb=215, shard_mb=8, prefetch_depth=1,  # min 202 MiB: globals 175
                           threads=args.threads, n_gen=32, n_ctx=256)
    model = moe_model(args.moe_size_mb)
    size_mb = os.path.getsize(model) / MIB
    return RunSettings(model_path=model, budget_mb=int(size_mb * 0.5), expert_cache_mb=0,
                       threads=args.threads, n_gen=32, n_ctx=256)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each window session")
    parser.add_argument("--headless-s", type=float, default=60.0, help="headless seconds before and after")
    parser.add_argument("--case", choices=("dense", "moe", "both"), default="both")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--moe-size-mb", type=int, default=240)
    parser.add_argument("--shots", type=Path, default=None,
                        help="folder for screenshots of the window at 1600x1000 and 1280x800 after each session")
    args = parser.parse_args()
    print(DISPLAY_LINE, f"cores {os.cpu_count()}")
    for case in ("dense", "moe"):
        if args.case in (case, "both"):
            run_case(case, case_settings(case, args), args)


if __name__ == "__main__":
    main()
