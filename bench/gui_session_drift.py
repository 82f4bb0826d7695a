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
- rounds per minute, the GUI event loop's stall p99, and RSS growth of the window and its run
  process together (the mean of the
  last minute against the mean of the second minute: weights come and go under the
  budget, so single samples swing by a shard).

tok/s of a minute is the decoded tokens of the rounds that ended in it over their
decode seconds (n_gen / avg_ts each), i.e. decode speed, as the rounds table shows it.
"""

from __future__ import annotations

import argparse
import os
import signal
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
from bench.headless_child import decode_rate, rounds_in_child, row_of  # noqa: E402
from shardscope.engine.base.errors import ShardscopeError  # noqa: E402
from shardscope.engine.base.user_dirs import cache_dir  # noqa: E402
from shardscope.engine.knobs.settings import RunSettings  # noqa: E402
from shardscope.engine.runs.run_factory import check_run  # noqa: E402

MIB = 1024 * 1024


def moe_model(size_mb: int) -> str:
    """A qwen3moe synth at Q4_K_M (the class the issue reported on), written once into the cache."""
    path = cache_dir() / "bench" / f"drift-qwen3moe-q4km-{size_mb}mb.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(Path(sys.executable).with_name("shardscope")), "synth", "--moe", "--arch", "qwen3moe",
                        "--quant", "q4_k_m", "--size-mb", str(size_mb), "--out", str(path)], check=True)
    return str(path)


def headless(settings: RunSettings, seconds: float) -> list:
    """Continuous rounds for ``seconds`` in a child process (bench/headless_child.py)."""
    return rounds_in_child(settings, seconds=seconds)


def gui_thread_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of the GUI thread (the process's main thread) so far."""
    for t in proc.threads():
        if t.id == proc.pid:
            return t.user_time + t.system_time
    return float("nan")


def session_rss_mb(proc: psutil.Process, window) -> float:
    """The session's RSS: the window's process and its run's (the engine runs in a process of
    its own, engine/runs/run_host.py)."""
    total = proc.memory_info().rss
    run = window.runs.run_process
    if run is not None and run.pid is not None:
        try:
            total += psutil.Process(run.pid).memory_info().rss
        except psutil.Error:  # between two runs: the window's part only
            pass
    return total / MIB


def window_session(settings: RunSettings, minutes: float, shots: Path | None = None, name: str = "") -> dict:
    app, window = open_window(settings.model_path, settings)
    window.resize(1600, 1000)
    proc = psutil.Process()
    ended: list[tuple[float, object]] = []  # (seconds into the session, summary)
    rss: list[tuple[float, float]] = []
    gui_cpu: list[tuple[float, float]] = []  # (seconds into the session, GUI thread CPU seconds)
    probe = StallProbe()
    # Ctrl-C inside Qt's loop would raise in whatever Python override Qt was calling, which Qt
    # prints and carries on from: here it only asks the loop below to end the session cleanly.
    interrupted: list[bool] = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    window.start_run()
    pump(app, 300, until=lambda: window.last_sample is not None or bool(interrupted))
    t0 = time.perf_counter()
    window.runs.summary.connect(lambda s, _shown: ended.append((time.perf_counter() - t0, row_of(s))))
    probe.start()
    gui_cpu.append((0.0, gui_thread_cpu_s(proc)))
    while time.perf_counter() - t0 < minutes * 60 and not interrupted:
        pump(app, 2.0, until=lambda: bool(interrupted))
        now = time.perf_counter() - t0
        rss.append((now, session_rss_mb(proc, window)))
        gui_cpu.append((now, gui_thread_cpu_s(proc)))
        if not window.is_running():
            print(f"  the run ended by itself: {window.last_error}")
            break
    probe.stop()
    signal.signal(signal.SIGINT, previous)
    if interrupted:
        stop(app, window)
        window.close()
        raise KeyboardInterrupt
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
    minutes_seen = max(1, int(span // 60))
    per_minute = [minute_row(m, ended, rss, gui_cpu) for m in range(minutes_seen)]
    first = decode_rate([s for t, s in ended if t <= 60.0])  # its first round (the load) left out
    last = decode_rate([s for t, s in ended if t > span - 60.0], skip_first=False)
    second_minute = [r for t, r in rss if 60.0 < t <= 120.0] or [r for _, r in rss[: len(rss) // 2]]
    last_minute = [r for t, r in rss if t > span - 60.0]
    return {"first": first, "last": last, "rounds": len(ended), "minutes": span / 60, "p99_ms": probe.p99(),
            "rss_from": statistics.mean(second_minute), "rss_to": statistics.mean(last_minute),
            "rss_peak": max(r for _, r in rss), "per_minute": per_minute}


def minute_row(m: int, ended, rss, gui_cpu) -> dict:
    """Minute m of the session: decode speed and where a token's time went (a slower disk shows in
    the wait, a busier CPU in the compute), the GUI thread's share of a core, RSS at its end."""
    lo, hi = 60.0 * m, 60.0 * (m + 1)
    rounds = [s for t, s in ended if lo < t <= hi]
    steady = [s for s in rounds if not s.stopped and s.n_gen > 0]
    cpu = [(t, c) for t, c in gui_cpu if lo <= t <= hi + 2.5]
    return {"minute": m + 1, "rounds": len(rounds),
            "tok_s": decode_rate(rounds, skip_first=m == 0),
            "compute_ms": median_of(s.compute_ms_per_token for s in steady),
            "wait_ms": median_of(s.wait_ms_per_token for s in steady),
            "read_mb": median_of(s.read_mb_per_token for s in steady),
            "gui_core": (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0]) if len(cpu) > 1 else float("nan"),
            "rss": next((r for t, r in reversed(rss) if t <= hi + 2.5), float("nan"))}


def median_of(values) -> float:
    data = [v for v in values if v == v]
    return statistics.median(data) if data else float("nan")


def print_minutes(rows: list[dict], headless_rows: list) -> None:
    print("  minute  rounds   tok/s  compute ms/tok  wait ms/tok  read MB/tok  GUI thread  RSS MiB")
    h_rounds = [r for r in headless_rows if not r.stopped and r.n_gen > 0]
    print(f"  headless        {decode_rate(headless_rows, skip_first=False):7.2f}  {median_of(r.compute_ms_per_token for r in h_rounds):14.2f}"
          f"  {median_of(r.wait_ms_per_token for r in h_rounds):11.2f}"
          f"  {median_of(r.read_mb_per_token for r in h_rounds):11.2f}")
    for r in rows:
        print(f"  {r['minute']:6d}  {r['rounds']:6d}  {r['tok_s']:6.2f}  {r['compute_ms']:14.2f}  {r['wait_ms']:11.2f}"
              f"  {r['read_mb']:11.2f}  {100 * r['gui_core']:8.1f} %  {r['rss']:7.0f}")


def run_case(name: str, settings: RunSettings, args: argparse.Namespace) -> None:
    minutes, headless_s, shots = args.minutes, args.headless_s, args.shots
    print(f"== {name}: {Path(settings.model_path).name}, budget {settings.budget_mb} MiB, "
          f"{settings.threads} threads, {settings.n_gen} tokens a round", flush=True)
    before_rows = headless(settings, headless_s)
    before = decode_rate(before_rows)
    print(f"  headless before: {before:.2f} tok/s", flush=True)
    w = window_session(settings, minutes, shots, name)
    after_rows = headless(settings, headless_s)
    after = decode_rate(after_rows)
    print(f"  headless after:  {after:.2f} tok/s", flush=True)
    print_minutes(w["per_minute"], before_rows[1:] + after_rows[1:])
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
        return dense_settings(args.dense_model or bundled_model(), args.dense_budget_mb, args.threads)
    return moe_settings(args.moe_model or moe_model(args.moe_size_mb), args.moe_budget_share, args.threads)


def dense_settings(model: str, budget_mb: int | None, threads: int) -> RunSettings:
    """The dense case: 8 MiB shards, depth 1, 32-token rounds; 215 MiB unless given (the bundled
    gemma's minimum is 202 MiB, globals 175)."""
    return RunSettings(model_path=model, budget_mb=budget_mb or 215, shard_mb=8, prefetch_depth=1,
                       threads=threads, n_gen=32, n_ctx=256)


def checked(settings: RunSettings, what: str) -> RunSettings:
    """``settings`` if a run would take them, else one line naming ``what`` and exit 2 (before any
    minute is spent)."""
    try:
        check_run(settings)
    except ShardscopeError as exc:
        print(f"{what}: {exc}", file=sys.stderr)
        sys.exit(2)
    return settings


def moe_settings(model: str, budget_share: float, threads: int) -> RunSettings:
    """The MoE case: a budget of ``budget_share`` of the file, expert cache auto, 32-token rounds."""
    size_mb = os.path.getsize(model) / MIB
    return RunSettings(model_path=model, budget_mb=int(size_mb * budget_share), expert_cache_mb=0,
                       threads=threads, n_gen=32, n_ctx=256)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each window session")
    parser.add_argument("--headless-s", type=float, default=60.0, help="headless seconds before and after")
    parser.add_argument("--case", choices=("dense", "moe", "both"), default="both")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--moe-size-mb", type=int, default=240, help="size of the qwen3moe synth written for the MoE case")
    parser.add_argument("--moe-model", default=None, help="an MoE GGUF of your own for the MoE case (else the synth)")
    parser.add_argument("--moe-budget-share", type=float, default=0.5,
                        help="the MoE case's budget as a share of its file's size (below 1: experts stream)")
    parser.add_argument("--dense-model", default=None, help="a dense GGUF of your own (else the bundled gemma)")
    parser.add_argument("--dense-budget-mb", type=int, default=None, help="the dense case's budget (default 215)")
    parser.add_argument("--shots", type=Path, default=None,
                        help="folder for screenshots of the window at 1600x1000 and 1280x800 after each session")
    args = parser.parse_args()
    for flag, path in (("--moe-model", args.moe_model), ("--dense-model", args.dense_model)):
        if path is not None and not os.path.isfile(path):
            parser.exit(2, f"{flag} {path}: no such file\n")
    if not 0 < args.moe_budget_share < 1:
        parser.exit(2, f"--moe-budget-share {args.moe_budget_share}: must be between 0 and 1 (below the file's size)\n")
    if args.shots is not None:  # checked now, not after ten minutes of session
        try:
            args.shots.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            parser.exit(2, f"--shots {args.shots}: cannot create the folder ({e.strerror})\n")
        if not os.access(args.shots, os.W_OK):
            parser.exit(2, f"--shots {args.shots}: the folder is not writable\n")
    cases = [(c, checked(case_settings(c, args), f"the {c} case")) for c in ("dense", "moe") if args.case in (c, "both")]
    print(DISPLAY_LINE, f"cores {os.cpu_count()}")
    try:
        for case, settings in cases:
            run_case(case, settings, args)
    except KeyboardInterrupt:
        parser.exit(130, "gui_session_drift: interrupted; nothing printed for the case under way\n")


if __name__ == "__main__":
    main()
