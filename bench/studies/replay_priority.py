"""Decode tok/s while the window's cacheability replay runs (app/experts/cacheability_curve.py:
a spawned process at the idle scheduling class), against the same run's tok/s just before and
after with no replay: the ratio issue 48 asks to stay >= 0.9.

    python -m bench.studies.replay_priority MODEL.gguf --budget-mb 90

The run streams in this process, as the window's run process does; the replay is its own
process either way. Prints each phase's tok/s and replay ÷ mean(idle before, idle after).
"""

from __future__ import annotations

import argparse
import threading
import time

from shardscope.app.experts.cacheability_curve import compute_in_process
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import open_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--budget-mb", type=int, required=True)
    parser.add_argument("--warm-s", type=float, default=20.0, help="routing to collect before replaying")
    parser.add_argument("--idle-s", type=float, default=15.0)
    args = parser.parse_args()
    settings = RunSettings(model_path=args.model, budget_mb=args.budget_mb, n_gen=32, n_ctx=128)
    rates = {}
    with open_run(settings) as run:
        thread = threading.Thread(target=lambda: run.run(continuous=True))
        thread.start()
        time.sleep(args.warm_s)
        for name in ("idle before", "replay", "idle after"):
            n0, t0 = run.clock.n_tokens, time.perf_counter()
            if name == "replay":
                result, _stats = compute_in_process(run.routing_records())
                what = f" ({len(result.sizes_mb)} sizes x {len(result.curves)} policies)"
            else:
                time.sleep(args.idle_s)
                what = ""
            dt = time.perf_counter() - t0
            rates[name] = (run.clock.n_tokens - n0) / dt
            print(f"{name}: {dt:.1f} s{what}, decode {rates[name]:.2f} tok/s", flush=True)
        run.stop()
        thread.join()
    idle = (rates["idle before"] + rates["idle after"]) / 2
    print(f"replay / idle = {rates['replay'] / idle:.2f} (goal >= 0.9)")


if __name__ == "__main__":
    main()
