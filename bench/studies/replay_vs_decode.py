"""Decode tok/s while the cacheability replay runs: in a thread of the run's process vs in a
separate process (app/experts/cacheability_curve.py). The replay is pure Python; the expert run's
decode thread needs the GIL at every layer's router callback.

    python -m bench.studies.replay_vs_decode MODEL.gguf --budget-mb 78
"""

from __future__ import annotations

import argparse
import threading
import time

from shardscope.app.experts.cacheability_curve import compute, compute_in_process
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import open_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--budget-mb", type=int, required=True)
    parser.add_argument("--warm-s", type=float, default=15.0, help="routing to collect before replaying")
    args = parser.parse_args()
    settings = RunSettings(model_path=args.model, budget_mb=args.budget_mb, n_gen=24, n_ctx=128)
    with open_run(settings) as run:
        thread = threading.Thread(target=lambda: run.run(continuous=True))
        thread.start()
        time.sleep(args.warm_s)
        for name, fn in (("idle", None), ("replay in a thread", compute), ("replay in a process", compute_in_process),
                         ("idle", None)):
            n0, t0 = run.clock.n_tokens, time.perf_counter()
            if fn is None:
                time.sleep(3)
            else:
                fn(run.routing_records())
            dt = time.perf_counter() - t0
            print(f"{name}: {dt:.1f} s, decode {(run.clock.n_tokens - n0) / dt:.1f} tok/s meanwhile")
        run.stop()
        thread.join()


if __name__ == "__main__":
    main()
