"""The live run's speed while the window's cacheability replay runs (app/experts/cacheability_curve.py:
a spawned process at the idle scheduling class), in both of the panel's modes, side by side in one run:

* **beside**: the replay runs next to the run (the panel's choice when a core is free). Decode
  tok/s during the replay ÷ the mean of the idle phases around it: the ratio issue 48 asks to
  stay >= 0.9.
* **paused**: the run holds at a token boundary while the replay runs (the panel's choice when
  ``pause_for_replay(cores, threads)``: no core free). Tokens decoded during the replay (0 or
  the one in flight), the replay's seconds against the beside replay's, and the avg_ts of the
  rounds that held the pause ÷ that of the idle rounds: about 1 when the held time is left out
  of the run's figures, and whether any of those rounds was flagged as stalled.

    python -m bench.studies.replay_priority MODEL.gguf --budget-mb 90 [--threads 2] [--mode both]

The run streams in this process, as the window's run process does; the replay is its own
process either way. The line "this host:" says which mode the panel would choose here.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from shardscope.app.experts.cacheability_curve import compute_in_process, pause_for_replay, usable_cores
from shardscope.engine.devices.run_projection import round_stall
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import open_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--budget-mb", type=int, required=True)
    parser.add_argument("--threads", type=int, default=RunSettings().threads)
    parser.add_argument("--mode", choices=("beside", "paused", "both"), default="both")
    parser.add_argument("--warm-s", type=float, default=20.0, help="routing to collect before replaying")
    parser.add_argument("--idle-s", type=float, default=15.0)
    args = parser.parse_args()
    cores = usable_cores()
    print(f"this host: {cores} cores, {args.threads} threads -> the panel "
          f"{'pauses the run' if pause_for_replay(cores, args.threads) else 'replays beside the run'}", flush=True)
    settings = RunSettings(model_path=args.model, budget_mb=args.budget_mb, n_gen=32, n_ctx=128, threads=args.threads)
    modes = ("beside", "paused") if args.mode == "both" else (args.mode,)
    phases = ["idle"]
    for mode in modes:
        phases += [mode, "idle"]
    rounds: list[tuple[float, object]] = []  # (end time, summary)
    idle, replays, held = [], {}, []
    with open_run(settings) as run:
        thread = threading.Thread(target=lambda: run.run(
            continuous=True, on_summary=lambda s: rounds.append((time.perf_counter(), s))))
        thread.start()
        time.sleep(args.warm_s)
        for name in phases:
            n0, t0 = run.clock.n_tokens, time.perf_counter()
            if name == "idle":
                time.sleep(args.idle_s)
                what = ""
            else:
                run.pause(name == "paused")
                try:
                    result, _stats = compute_in_process(run.routing_records())
                finally:
                    run.pause(False)
                what = f" ({len(result.sizes_mb)} sizes x {len(result.curves)} policies)"
            t1 = time.perf_counter()
            rate = (run.clock.n_tokens - n0) / (t1 - t0)
            if name == "idle":
                idle.append(rate)
            else:
                replays[name] = (rate, t1 - t0, run.clock.n_tokens - n0)
                if name == "paused":
                    held.append((t0, t1))
            print(f"{name}: {t1 - t0:.1f} s{what}, {run.clock.n_tokens - n0} tokens, decode {rate:.2f} tok/s",
                  flush=True)
        run.stop()
        thread.join()
    base = statistics.mean(idle)
    if "beside" in replays:
        print(f"beside: replay / idle = {replays['beside'][0] / base:.2f} (goal >= 0.9)")
    if "paused" in replays:
        t0, t1 = held[0]
        # the round that was running when the pause began, and those until its end
        holding = [i for i, (end, _s) in enumerate(rounds) if end >= t0 and (i == 0 or rounds[i - 1][0] <= t1)]
        clean = [s for i, (_end, s) in enumerate(rounds) if i > 0 and i not in holding]  # the first is cold
        holding = [rounds[i][1] for i in holding]
        ratio = statistics.mean(s.avg_ts for s in holding) / statistics.mean(s.avg_ts for s in clean)
        flagged = sum(bool(round_stall(s)) for s in holding)
        line = (f"paused: {replays['paused'][2]} tokens in {replays['paused'][1]:.1f} s of replay; "
                f"avg_ts of the {len(holding)} rounds holding the pause / the others' = {ratio:.2f}, "
                f"{flagged} of them flagged stalled")
        if "beside" in replays:
            line += f"; replay {replays['paused'][1]:.1f} s paused vs {replays['beside'][1]:.1f} s beside"
        print(line)


if __name__ == "__main__":
    main()
