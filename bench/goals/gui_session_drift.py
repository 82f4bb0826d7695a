"""Does the window slow the run it measures as the session goes on?

For each case (a dense model and an MoE file, both below their size in budget): the real window
(offscreen unless a display is there) runs continuously for ``--minutes`` beside a headless run
of the same settings (a child process, as a user's ``shardscope bench`` is: bench/lib/headless_child.py
says why), each run on a copy of the file of its own written in the same minute
(bench/lib/drift_cases.file_copies says why), and the two take turns on the
cores: ``--turn-s`` seconds the window's run, then as long the headless one, each paused
(SIGSTOP) while the other goes. Both runs and the window live through the whole session. So
window ÷ headless is measured in the same minutes, and the host's own drift over the session
shows as the headless run's last minute ÷ first minute, beside the window's. (Before, the
headless runs went before and after the session: a host that lost a fifth of its speed within
it could not be told from the window.)

A turn ends at a round's end: the headless child stops itself between two rounds, the window's
run is stopped as soon as the window hears a round end (in the next round's prompt pass); a
round a pause fell into anyway is left out (bench/lib/turns.py says how it is told). Short turns
then cost no rounds, and the two runs' turns see nearly the same host seconds (the host here
changes speed by 10-30 % from one 15-s turn to the next: docs/decisions.md).

After the session the window closes and the headless run that lived through it takes turns with
a fresh process of the same settings for ``--control-s`` seconds (the control): aged ÷ fresh near 1
says the headless run's last ÷ first is the host's drift, not a process slowing with age, so the
window's drift with the host's taken out is (window ÷ headless) last ÷ first, printed with it.

Printed per case, per minute and for the first and the last minute:

- window ÷ headless;
- the window's last minute ÷ first minute, and the headless run's in the same minutes;
- rounds per minute, the GUI event loop's stall p99, the GUI thread's share of a core (also
  during the headless turns, when it only waits), the host's steal time (the hypervisor's, from
  /proc/stat: CPU time the host gave to others), and RSS growth of the window and its run
  process together (the mean of the last minute against the mean of the second minute:
  weights come and go under the budget, so single samples swing by a shard);
- a goals line: each of issue 32's goals with the session's figure, met or MISSED, and where
  the window's last ÷ first missed, the headless run's in the same minutes beside it
  (bench/lib/drift_goals.py).

tok/s is the decoded tokens of the rounds that ended in a minute's turns over their decode
seconds (n_gen / avg_ts each), i.e. decode speed, as the rounds table shows it.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import time
from pathlib import Path

import psutil

from bench.lib.virtual_display import start_display

DISPLAY_LINE = start_display()  # before Qt is imported: it picks its platform once

from PySide6.QtCore import QEventLoop, QObject, Qt, QTimer, Signal  # noqa: E402

from bench.lib.bench_models import bundled_model  # noqa: E402
from bench.lib.drift_cases import checked, dense_settings, file_copies, moe_model, moe_settings, no_room_for_copies  # noqa: E402
from bench.lib.drift_goals import goals_line  # noqa: E402
from bench.lib.gui_session import StallProbe, open_window, pump, stop  # noqa: E402
from bench.lib.headless_child import RoundStream, decode_rate, loaded_and_paused, row_of  # noqa: E402
from bench.lib.turns import counted, host_steal, steal_share, turn_seconds  # noqa: E402
from shardscope.engine.base.errors import ShardscopeError  # noqa: E402
from shardscope.engine.base.units import MIB  # noqa: E402
from shardscope.engine.knobs.settings import RunSettings  # noqa: E402
from shardscope.engine.output.csv_out import write_rows  # noqa: E402
from shardscope.engine.runs.output_checks import check_writable  # noqa: E402


def gui_thread_cpu_s(proc: psutil.Process) -> float:
    """CPU seconds of the GUI thread (the process's main thread) so far."""
    for t in proc.threads():
        if t.id == proc.pid:
            return t.user_time + t.system_time
    return float("nan")


def process_cpu_s(proc: psutil.Process | None) -> float:
    """CPU seconds of a whole process so far (NaN without one)."""
    if proc is None:
        return float("nan")
    times = proc.cpu_times()
    return times.user + times.system


def x_server(proc: psutil.Process) -> psutil.Process | None:
    """The Xvfb this bench started (it draws what the window paints), else None."""
    return next((c for c in proc.children() if c.name().startswith("Xvfb")), None)


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


class Wake(QObject):
    """Ends a wait of the GUI thread from any thread (a queued signal: the headless child's
    reader thread says its child stopped)."""
    woke = Signal()


def pump_until(app, seconds: float, done, wake: Wake) -> None:
    """Qt's event loop until ``done()`` holds (checked whenever ``wake`` fires) or ``seconds`` pass:
    no polling timer, whose wakeups would be charged to the window. ``done`` must hold before
    ``wake`` fires (a wake between the check and the loop is queued, so it is not missed)."""
    deadline = time.perf_counter() + seconds
    while True:
        loop = QEventLoop()
        wake.woke.connect(loop.quit, Qt.ConnectionType.QueuedConnection)
        timer = QTimer()
        timer.setSingleShot(True)
        timer.timeout.connect(loop.quit)
        try:
            left = deadline - time.perf_counter()
            if done() or left <= 0:
                return
            timer.start(int(left * 1000) + 1)
            loop.exec()
        finally:
            timer.stop()
            wake.woke.disconnect(loop.quit)


def window_session(settings: RunSettings, minutes: float, turn_s: float, shots: Path | None,
                   name: str, control_s: float, partner: RoundStream) -> dict:
    """The session beside ``partner``, the headless run (loaded, paused) on a copy of the model."""
    app, window = open_window(settings.model_path, settings)
    window.resize(1600, 1000)
    proc = psutil.Process()
    ended: list[tuple[float, object]] = []  # (perf_counter when the window heard of it, the round)
    turns: list[tuple[float, float, str]] = []  # (start, end, "window" or "headless")
    rss: list[tuple[float, float]] = []
    gui_cpu: list[tuple[float, float]] = []  # (perf_counter, GUI thread CPU seconds)
    steal: list[tuple[float, tuple[float, float]]] = []  # (perf_counter, host_steal())
    # The window's whole process (the run-reader thread too) and the X server: all the CPU beside
    # the run, which on two cores the decode threads give up.
    xserver = x_server(proc)
    beside: dict[str, list[tuple[float, float]]] = {"process": [], "X server": []}

    def read_beside() -> None:
        now = time.perf_counter()
        beside["process"].append((now, process_cpu_s(proc)))
        beside["X server"].append((now, process_cpu_s(xserver)))
        gui_cpu.append((now, gui_thread_cpu_s(proc)))
        steal.append((now, host_steal()))
    # 50 ms, not the probe's 10: at 100 wakeups a second the probe itself took 3.4 % of a core on the
    # GUI thread (3.8 % with the run paused, where the window alone takes 0.4 %: py-spy), charged to
    # the window. A stall is how late the timer fires, measured to the ms either way.
    probe = StallProbe(interval_ms=50)
    # Ctrl-C inside Qt's loop would raise in whatever Python override Qt was calling, which Qt
    # prints and carries on from: here it only asks the loop below to end the session cleanly.
    interrupted: list[bool] = []
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    wake = Wake()
    partner.on_paused = wake.woke.emit
    window.start_run()
    pump(app, 300, until=lambda: window.last_sample is not None or bool(interrupted))
    window.runs.summary.connect(lambda s, _shown: ended.append((time.perf_counter(), row_of(s))))
    # The window's run is stopped as soon as the window hears a round end after its turn: the next
    # round has only begun its prompt pass (this slot runs after the window's own, connected first).
    window_pause = {"wanted": False, "done": False}

    def pause_window_run(*_) -> None:
        if window_pause["wanted"] and window.runs.run_process is not None:
            os.kill(window.runs.run_process.pid, signal.SIGSTOP)
            window_pause.update(wanted=False, done=True)
            wake.woke.emit()
    window.runs.summary.connect(pause_window_run)
    # A restart (a new plan on the same timeline) starts a run whose first round loads: logged
    # beside the rounds so a slow one can be matched to it.
    restarts: list[float] = []
    window.runs.run_started.connect(lambda *_: restarts.append(time.perf_counter()))
    print(f"  nice: the window's GUI thread {proc.nice()}, its run process "
          f"{psutil.Process(window.runs.run_process.pid).nice()}, the headless run {psutil.Process(partner.pid).nice()}"
          " (app/base/window_priority.py)", flush=True)
    t0 = time.perf_counter()
    probe.start()
    read_beside()

    def go(who: str, until: float) -> None:
        """One turn: ``who``'s run goes until ``until`` and then to its next round end, while the
        window draws as ever; it ends with that run stopped between two rounds."""
        start = time.perf_counter()
        while time.perf_counter() < until and not interrupted:
            # No ``until``: its 5 ms check is 200 Python wakeups a second on the GUI thread, the
            # bench's cost, not the window's; Ctrl-C is seen within the 2 s.
            pump(app, min(2.0, max(0.0, until - time.perf_counter())))
            rss.append((time.perf_counter(), session_rss_mb(proc, window)))
            read_beside()
        if who == "window":
            window_pause.update(wanted=True, done=False)
            pump_until(app, 120, lambda: window_pause["done"] or bool(interrupted) or not window.is_running(), wake)
            if not window_pause["done"] and window.runs.run_process is not None:  # no round end came
                window_pause["wanted"] = False
                os.kill(window.runs.run_process.pid, signal.SIGSTOP)
        else:
            partner.pause_at_round_end()
            pump_until(app, 120, lambda: partner.paused.is_set() or bool(interrupted), wake)
            if not partner.paused.is_set():
                os.kill(partner.pid, signal.SIGSTOP)
        turns.append((start, time.perf_counter(), who))

    try:
        while time.perf_counter() - t0 < minutes * 60 and not interrupted and window.is_running():
            go("window", time.perf_counter() + turn_s)
            run_pid = window.runs.run_process.pid
            partner.resume()
            try:
                go("headless", time.perf_counter() + turn_s)
            finally:
                os.kill(run_pid, signal.SIGCONT)
    except BaseException:
        partner.end()
        raise
    finally:
        probe.stop()
        signal.signal(signal.SIGINT, previous)
    if not window.is_running() and not interrupted:
        print(f"  the run ended by itself: {window.last_error}")
    if interrupted:
        partner.end()
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
    try:  # the window and its run are gone: the control has the cores to itself
        aged, fresh = aged_vs_fresh(partner, settings, turn_s, control_s) if control_s > 0 else (math.nan,) * 2
    finally:
        partner.end()
    clean = {"window": counted(ended, turns, "window"), "headless": counted(partner.ended, turns, "headless")}
    log = round_log(name, t0, turns, {"window": ended, "headless": partner.ended}, clean, restarts)
    span = turns[-1][1] - t0
    per_minute = [minute_row(m, t0, clean, turns, rss, gui_cpu, steal) for m in range(max(1, int(round(span / 60))))]
    second_minute = [r for t, r in rss if 60.0 < t - t0 <= 120.0] or [r for _, r in rss[: len(rss) // 2]]
    last_minute = [r for t, r in rss if t > t0 + span - 60.0]
    return {"rounds": len(ended), "minutes": span / 60, "p99_ms": probe.p99(),
            "rss_from": statistics.mean(second_minute), "rss_to": statistics.mean(last_minute),
            "rss_peak": max(r for _, r in rss), "per_minute": per_minute, "aged": aged, "fresh": fresh, "log": log,
            "dropped": {who: sum(t0 <= t <= turns[-1][1] for t, _ in rounds) - len(clean[who])
                        for who, rounds in (("window", ended), ("headless", partner.ended))},
            "shared": {who: sum(r.shared for _, r in rounds) for who, rounds in (("window", ended),
                                                                              ("headless", partner.ended))},
            "headless_gui_core": core_share(gui_cpu, [(a, b) for a, b, who in turns if who == "headless"]),
            "beside": {k: core_share(v, [(a, b) for a, b, who in turns if who == "window"]) for k, v in beside.items()}}


def aged_vs_fresh(aged: RoundStream, settings: RunSettings, turn_s: float, seconds: float) -> tuple[float, float]:
    """The control: the headless run that lived through the session against a fresh process of the
    same settings on the window's copy (the window's run is gone), taking turns for ``seconds``
    (decode tok/s of each). Equal, the headless run's last ÷ first is the host's drift, not a
    process slowing with age, and the window's drift can be read against it."""
    fresh = loaded_and_paused(RoundStream(settings))
    try:
        turns: list[tuple[float, float, str]] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for who, stream in (("aged", aged), ("fresh", fresh)):
                start, between_rounds = stream.take_turn(turn_s)
                if not between_rounds:
                    os.kill(stream.pid, signal.SIGSTOP)
                turns.append((start, time.perf_counter(), who))
        return (decode_rate([r for _, r in counted(aged.ended, turns, "aged")], skip_first=False),
                decode_rate([r for _, r in counted(fresh.ended, turns, "fresh")], skip_first=False))
    finally:
        fresh.end()


LOG_COLUMNS = ("case", "who", "at_s", "turn", "since_turn_start_s", "decode_s", "ttft_ms", "n_gen", "tok_s",
               "compute_ms_per_token", "wait_ms_per_token", "read_mb_per_token", "shared", "counted")


def round_log(case: str, t0: float, turns, ended: dict, clean: dict, restarts: list[float]) -> list[dict]:
    """Every round of the session as a row (``--rounds-csv``): when it ended (heard, for the
    window's), in which turn, its decode seconds and where a token's time went, and whether the
    minutes counted it; the window's restarts as rows of their own."""
    rows = []
    for who, rounds in ended.items():
        counted = {id(r) for _, r in clean[who]}
        for t, r in rounds:
            turn = next((i for i, (a, b, _) in enumerate(turns) if a <= t <= b), None)
            rows.append({"case": case, "who": who, "at_s": t - t0, "turn": turn,
                         "since_turn_start_s": t - turns[turn][0] if turn is not None else math.nan,
                         "decode_s": r.n_gen / r.avg_ts if r.avg_ts > 0 else math.nan, "ttft_ms": r.ttft_ms,
                         "n_gen": r.n_gen, "tok_s": r.avg_ts, "compute_ms_per_token": r.compute_ms_per_token,
                         "wait_ms_per_token": r.wait_ms_per_token, "read_mb_per_token": r.read_mb_per_token,
                         "shared": r.shared, "counted": id(r) in counted})
    rows += [{"case": case, "who": "window restart", "at_s": t - t0} for t in restarts]
    return sorted(rows, key=lambda row: row["at_s"])


def core_share(gui_cpu, spans) -> float:
    """The GUI thread's CPU seconds over wall seconds within ``spans``."""
    cpu = wall = 0.0
    for (t1, c1), (t2, c2) in zip(gui_cpu, gui_cpu[1:]):
        if any(a <= t1 and t2 <= b + 0.5 for a, b in spans):
            cpu, wall = cpu + c2 - c1, wall + t2 - t1
    return cpu / wall if wall > 0 else float("nan")


def minute_row(m: int, t0: float, clean: dict, turns, rss, gui_cpu, steal) -> dict:
    """Minute m of the session: each run's decode speed over its turns in it, where a window
    token's time went (a slower disk shows in the wait, a busier CPU in the compute), the GUI
    thread's share of a core, the host's steal share, RSS at its end."""
    lo, hi = t0 + 60.0 * m, t0 + 60.0 * (m + 1)
    window = [r for t, r in clean["window"] if lo < t <= hi]
    headless = [r for t, r in clean["headless"] if lo < t <= hi]
    steady = [s for s in window if not s.stopped and s.n_gen > 0]
    h_steady = [s for s in headless if not s.stopped and s.n_gen > 0]
    w, h = decode_rate(window, skip_first=False), decode_rate(headless, skip_first=False)
    return {"minute": m + 1, "rounds": len(window), "tok_s": w, "headless": h, "ratio": w / h,
            "compute_ms": median_of(s.compute_ms_per_token for s in steady),
            "wait_ms": median_of(s.wait_ms_per_token for s in steady),
            "h_compute_ms": median_of(s.compute_ms_per_token for s in h_steady),
            "h_wait_ms": median_of(s.wait_ms_per_token for s in h_steady),
            "read_mb": median_of(s.read_mb_per_token for s in steady),
            "gui_core": core_share(gui_cpu, [(lo, hi)]), "steal": steal_share(steal, lo, hi),
            "rss": next((r for t, r in reversed(rss) if t <= hi + 2.5), float("nan"))}


def median_of(values) -> float:
    data = [v for v in values if v == v]
    return statistics.median(data) if data else float("nan")


def print_minutes(rows: list[dict]) -> None:
    print("  minute  window rounds  window tok/s  headless tok/s  window/headless  compute ms/tok window/headless"
          "  wait ms/tok window/headless  read MB/tok  GUI thread  host steal  RSS MiB")
    for r in rows:
        print(f"  {r['minute']:6d}  {r['rounds']:13d}  {r['tok_s']:12.2f}  {r['headless']:14.2f}  {r['ratio']:15.3f}"
              f"  {r['compute_ms']:14.2f} / {r['h_compute_ms']:6.2f}  {r['wait_ms']:11.2f} / {r['h_wait_ms']:6.2f}"
              f"  {r['read_mb']:11.2f}  {100 * r['gui_core']:8.1f} %  {100 * r['steal']:8.1f} %  {r['rss']:7.0f}")


def run_case(name: str, settings: RunSettings, args: argparse.Namespace) -> list[dict]:
    """Runs one case's session, prints its figures, returns its round log."""
    with file_copies(settings.model_path, ("window", "headless")) as (window_copy, partner_copy):
        settings = settings.with_changes(model_path=window_copy)  # the window's, and the control's fresh run's
        # Loads beside nothing else, runs a few rounds to time them, then waits for its turns.
        partner = loaded_and_paused(RoundStream(settings.with_changes(model_path=partner_copy)), rounds=4)
        try:
            turn_s = args.turn_s or turn_seconds([r for _, r in partner.ended[1:]])
            print(f"== {name}: {Path(settings.model_path).name}, budget {settings.budget_mb} MiB, "
                  f"{settings.threads} threads, {settings.n_gen} tokens a round; turns of {turn_s:.1f} s"
                  f"{'' if args.turn_s else ' (4 x a round decode, at least 5 s)'}, each to its next round end",
                  flush=True)
            w = window_session(settings, args.minutes, turn_s, args.shots, name, args.control_s, partner)
        finally:
            partner.end()
    print_minutes(w["per_minute"])
    # A minute of headless turns only (long turns, a short session) has no window figure to judge.
    judged = [r for r in w["per_minute"] if r["rounds"]] or w["per_minute"]
    first, last = judged[0], judged[-1]
    growth = 100.0 * (w["rss_to"] - w["rss_from"]) / w["rss_from"]
    print(f"  GUI thread during the headless turns (the window open, its run paused): "
          f"{100 * w['headless_gui_core']:.1f} % of a core; during the window's turns, the window's whole "
          f"process {100 * w['beside']['process']:.1f} % and the X server {100 * w['beside']['X server']:.1f} %")
    print(f"  window first minute {first['tok_s']:.2f} tok/s, last minute {last['tok_s']:.2f} tok/s "
          f"over {w['minutes']:.1f} min, {w['rounds'] / w['minutes']:.1f} rounds/min")
    print(f"  {name}: window/headless first minute {first['ratio']:.2f}, last minute {last['ratio']:.2f}; "
          f"last/first minute window {last['tok_s'] / first['tok_s']:.2f}, headless "
          f"{last['headless'] / first['headless']:.2f} (the host's drift); GUI stall p99 {w['p99_ms']:.0f} ms; "
          f"RSS {w['rss_from']:.0f} -> {w['rss_to']:.0f} MiB ({growth:+.1f} %, peak {w['rss_peak']:.0f})",
          flush=True)
    print(f"  {name} " + goals_line({"first": first["ratio"], "last": last["ratio"],
                                     "drift": last["tok_s"] / first["tok_s"], "rss": growth},
                                    host_drift=last["headless"] / first["headless"]), flush=True)
    print(f"  rounds of the session left out (the window's first, and those a pause fell into): window "
          f"{w['dropped']['window']}, headless {w['dropped']['headless']}")
    if any(w["shared"].values()):  # the runs' own lock check (/proc/locks) saw another run on their file
        print(f"  SHARED: {w['shared']['window']} window rounds and {w['shared']['headless']} headless rounds ran "
              f"while another run mapped their model file: their figures are not theirs alone", flush=True)
    if w["aged"] == w["aged"]:
        print(f"  control: the headless run after the session {w['aged']:.2f} tok/s, a fresh process in the same "
              f"{args.control_s:g} s {w['fresh']:.2f}: aged/fresh {w['aged'] / w['fresh']:.2f} (about 1: the headless "
              f"run's last/first is the host's drift); the window's drift against it, (window/headless) last/first "
              f"{last['ratio'] / first['ratio']:.2f}", flush=True)
    return w["log"]


def case_settings(case: str, args: argparse.Namespace) -> RunSettings:
    if case == "dense":
        return dense_settings(args.dense_model or bundled_model(), args.dense_budget_mb, args.threads)
    return moe_settings(args.moe_model or moe_model(args.moe_size_mb), args.moe_budget_share, args.threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each window session")
    parser.add_argument("--turn-s", type=float, default=None,
                        help="seconds of each turn (each then runs to its next round end): the window's run, then "
                             "the headless one, in turns; default 4 x a round's decode, at least 5 s")
    parser.add_argument("--control-s", type=float, default=120.0,
                        help="after the session, the headless run against a fresh one in turns for this long (0: none)")
    parser.add_argument("--case", choices=("dense", "moe", "both"), default="both")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--moe-size-mb", type=int, default=240,
                        help="size of the qwen3moe synth written for the MoE case")
    parser.add_argument("--moe-model", default=None, help="an MoE GGUF of your own for the MoE case (else the synth)")
    parser.add_argument("--moe-budget-share", type=float, default=0.5,
                        help="the MoE case's budget as a share of its file's size (below 1: experts stream)")
    parser.add_argument("--dense-model", default=None, help="a dense GGUF of your own (else the bundled gemma)")
    parser.add_argument("--dense-budget-mb", type=int, default=None, help="the dense case's budget (default 215)")
    parser.add_argument("--rounds-csv", default=None,
                        help="write every round of the sessions (both runs, when each ended, its turn, decode "
                             "seconds, whether counted) and the window's restarts to this CSV")
    parser.add_argument("--shots", type=Path, default=None,
                        help="folder for screenshots of the window at 1600x1000 and 1280x800 after each session")
    args = parser.parse_args()
    for flag, path in (("--moe-model", args.moe_model), ("--dense-model", args.dense_model)):
        if path is not None and not os.path.isfile(path):
            parser.exit(2, f"{flag} {path}: no such file\n")
    if args.turn_s is not None and not args.turn_s > 0:
        parser.exit(2, f"--turn-s {args.turn_s:g}: must be above 0 seconds\n")
    if not args.control_s >= 0:
        parser.exit(2, f"--control-s {args.control_s:g}: must be 0 (no control) or more seconds\n")
    if not 0 < args.moe_budget_share < 1:
        parser.exit(2, f"--moe-budget-share {args.moe_budget_share}: must be between 0 and 1 (below the file's size)\n")
    if args.shots is not None:  # checked now, not after ten minutes of session
        try:
            args.shots.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            parser.exit(2, f"--shots {args.shots}: cannot create the folder ({e.strerror})\n")
        if not os.access(args.shots, os.W_OK):
            parser.exit(2, f"--shots {args.shots}: the folder is not writable\n")
    if args.rounds_csv is not None:  # checked now, written at the end
        try:
            check_writable("--rounds-csv", args.rounds_csv)
        except ShardscopeError as exc:
            parser.exit(2, f"{exc}\n")
    cases = [(c, checked(case_settings(c, args), f"the {c} case"))
             for c in ("dense", "moe") if args.case in (c, "both")]
    no_room = no_room_for_copies(max(os.path.getsize(s.model_path) for _, s in cases), 2)  # a case's two at a time
    if no_room:
        parser.exit(2, no_room + "\n")
    print(DISPLAY_LINE, f"cores {os.cpu_count()}")
    log: list[dict] = []
    try:
        for case, settings in cases:
            log += run_case(case, settings, args)
    except KeyboardInterrupt:
        parser.exit(130, "gui_session_drift: interrupted; nothing printed for the case under way\n")
    if args.rounds_csv is not None:
        write_rows(args.rounds_csv, LOG_COLUMNS, log)
        print(f"rounds: {args.rounds_csv} ({len(log)} rows)")


if __name__ == "__main__":
    main()
