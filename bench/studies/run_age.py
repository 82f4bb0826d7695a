"""Does a headless run slow with its own age, with its file's age, or with the host?

gui_session_drift's raw last minute ÷ first minute (issue 32's goal: ≥ 0.95) follows the headless
run's in the same minutes. This says which of three things that is, for the same cases:

1. **alone**: a headless run (a child process, bench/lib/headless_child.py) on a fresh copy of the
   model runs alone for ``--alone-s``; per minute its decode tok/s and the host's steal
   (/proc/stat, a figure the engine does not compute).
2. **turns**: then four runs take turns on the cores for ``--turns-s`` (each turn to its next
   round end, the order shuffled every cycle, so none always follows the same one):
   - *aged*: the run of phase 1, on its copy;
   - *old file*: a fresh process on a second copy written with the first and never read since;
   - *new file*: a fresh process on a copy written just now;
   - *original*: a fresh process on the model file itself (hours or days old).

Printed: each one's decode tok/s, compute and wait ms a token, and three ratios — aged ÷ old file
(the process's age: about 1 if a run does not slow as it lives), new ÷ old file and original ÷ old
file (the file's age on this host-cached disk). A minute's tok/s against the first minute in
phase 1 beside the steal says how far the host alone moves a run.

    .venv/bin/python -m bench.studies.run_age --case moe
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from pathlib import Path

from bench.lib.bench_models import bundled_model
from bench.lib.drift_cases import checked, dense_settings, file_copies, moe_model, moe_settings, no_room_for_copies
from bench.lib.headless_child import RoundStream, decode_rate, loaded_and_paused
from bench.lib.turns import counted, host_steal, steal_share, turn_seconds

WHO = ("aged", "old file", "new file", "original")


def alone(stream: RoundStream, seconds: float, steal: list) -> None:
    """Phase 1: ``stream`` runs alone for ``seconds``; prints each minute's tok/s and steal."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        steal.append((time.perf_counter(), host_steal()))
        time.sleep(1.0)
    steal.append((time.perf_counter(), host_steal()))
    minutes: dict[int, list] = {}
    for t, row in stream.ended[1:]:  # the first: its load
        if t - t0 < seconds:
            minutes.setdefault(int((t - t0) // 60), []).append(row)
    first = None
    print("  alone: minute  tok/s  ÷ minute 1  host steal")
    for m in sorted(minutes):
        rate = decode_rate(minutes[m], skip_first=False)
        first = first or rate
        share = steal_share(steal, t0 + 60 * m, t0 + 60 * m + 60)
        print(f"         {m + 1:6d} {rate:6.1f} {rate / first:11.2f} {100 * share:9.1f} %")


def in_turns(streams: dict[str, RoundStream], seconds: float, turn_s: float, steal: list) -> list:
    """Phase 2: the streams take turns (shuffled each cycle) for ``seconds``; returns the turns."""
    turns: list[tuple[float, float, str]] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        order = list(streams.items())
        random.shuffle(order)
        for who, stream in order:
            start, between_rounds = stream.take_turn(turn_s)
            if not between_rounds:
                raise SystemExit(f"run_age: the {who} run did not end a round within 120 s")
            turns.append((start, time.perf_counter(), who))
            steal.append((time.perf_counter(), host_steal()))
    return turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=("dense", "moe"), default="moe")
    parser.add_argument("--alone-s", type=float, default=540.0, help="phase 1: the first run alone this long")
    parser.add_argument("--turns-s", type=float, default=180.0, help="phase 2: the four runs in turns this long")
    parser.add_argument("--turn-s", type=float, default=None,
                        help="seconds of a turn (default: 4 x a round decode, 5 s at least)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for flag in ("alone_s", "turns_s"):
        if not getattr(args, flag) > 0:
            parser.exit(2, f"--{flag.replace('_', '-')} {getattr(args, flag):g}: must be above 0 seconds\n")
    if args.turn_s is not None and not args.turn_s > 0:
        parser.exit(2, f"--turn-s {args.turn_s:g}: must be above 0 seconds\n")
    model = bundled_model() if args.case == "dense" else moe_model(240)

    def settings_for(path: str):
        if args.case == "dense":
            return dense_settings(path, None, args.threads)
        return moe_settings(path, 0.5, args.threads)

    checked(settings_for(model), f"the {args.case} case")
    no_room = no_room_for_copies(os.path.getsize(model), 3)
    if no_room:
        parser.exit(2, no_room + "\n")
    streams: dict[str, RoundStream] = {}
    try:
        with file_copies(model, ("aged", "old file")) as (aged_copy, old_copy):
            try:
                phases(streams, settings_for, model, aged_copy, old_copy, args)
            finally:  # the runs end before their copies go
                for stream in streams.values():
                    stream.end()
    except KeyboardInterrupt:
        parser.exit(130, "run_age: interrupted; nothing printed for the phase under way\n")


def phases(streams: dict, settings_for, model: str, aged_copy: str, old_copy: str, args) -> None:
    """Phase 1, then phase 2 beside a copy written now; prints as it goes."""
    steal: list = []
    print(f"== {args.case}: {Path(model).name}, {args.threads} threads; phase 1 {args.alone_s:g} s alone, "
          f"phase 2 {args.turns_s:g} s in turns", flush=True)
    streams["aged"] = RoundStream(settings_for(aged_copy))
    alone(streams["aged"], args.alone_s, steal)
    loaded_and_paused(streams["aged"])
    with file_copies(model, ("new file",)) as (new_copy,):
        try:
            for who, path in (("old file", old_copy), ("new file", new_copy), ("original", model)):
                streams[who] = loaded_and_paused(RoundStream(settings_for(path)))
            turn_s = args.turn_s or turn_seconds([r for _, r in streams["aged"].ended[1:]])
            t1 = time.perf_counter()
            turns = in_turns(streams, args.turns_s, turn_s, steal)
        finally:  # the runs end before the new copy goes
            for stream in streams.values():
                stream.end()
    print(f"  turns of {turn_s:.1f} s for {time.perf_counter() - t1:.0f} s, host steal "
          f"{100 * steal_share(steal, t1, turns[-1][1]):.1f} %")
    rate = {}
    for who in WHO:
        rows = [r for _, r in counted(streams[who].ended, turns, who)]
        rate[who] = decode_rate(rows, skip_first=False)
        compute = statistics.fmean(r.compute_ms_per_token for r in rows) if rows else math.nan
        wait = statistics.fmean(r.wait_ms_per_token for r in rows) if rows else math.nan
        print(f"  {who:9s} {rate[who]:7.2f} tok/s over {len(rows):3d} rounds; compute {compute:6.2f}, "
              f"wait {wait:6.2f} ms a token")
    print(f"  aged ÷ old file {rate['aged'] / rate['old file']:.2f} (the process's age), new ÷ old file "
          f"{rate['new file'] / rate['old file']:.2f}, original ÷ old file "
          f"{rate['original'] / rate['old file']:.2f} (the file's age)", flush=True)


if __name__ == "__main__":
    main()
