"""Overhead of shardscope over bare llama-cpp-python, fitting and streaming.

Side by side in one process, alternating so drift hits all equally:
- bare llama-cpp-python (same low-level session, no eval callback, no controller);
- shardscope with the model fitting its budget: no eval callback is installed at all
  (the controller and the sampler run, the hook does not), so this measures "costs
  nothing when it fits" — by construction, not by a fast hook. Goal: ratio ≥ 0.95;
- shardscope in streaming mode with nothing to evict: the per-layer hook on and the
  controller answering every layer, the budget still holding the whole model, so the
  ratio is the cost of the machinery alone, not of reading the disk.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.lib.bench_models import bundled_model
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.stream.llama_session import LlamaSession

PROMPT = "The history of the printing press begins"


def bare_tok_s(model: str, n_gen: int, threads: int) -> float:
    with LlamaSession(model, n_threads=threads, n_ctx=256) as session:
        result = session.generate(PROMPT, n_gen)
    return len(result.token_s) / sum(result.token_s)


def shardscope_tok_s(model: str, n_gen: int, threads: int) -> float:
    settings = RunSettings(model_path=model, budget_mb=65536, threads=threads, n_gen=n_gen, n_ctx=256)
    with open_run(settings, streams="layers") as run:
        if run.session_hook_active_after_load():
            raise RuntimeError("the model fits its budget, yet the eval callback is installed")
        return run.run().avg_ts


def streaming_mode_tok_s(model: str, n_gen: int, threads: int) -> float:
    """Hook on from the first decoded token, budget = everything: nothing is evicted."""
    settings = RunSettings(model_path=model, budget_mb=65536, threads=threads, n_gen=n_gen + 1, n_ctx=256)
    with open_run(settings, streams="layers") as run:
        run.load()
        run.session.request_layer_hook()  # installed before the first decoded token
        summary = run.run()
        if not run.session.hook_active:
            raise RuntimeError("the layer hook did not come on")
        if summary.read_mb_per_token > 1.0:
            raise RuntimeError(f"streaming mode read {summary.read_mb_per_token:.1f} MiB/token: something was evicted")
        return summary.avg_ts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    model = args.model or bundled_model()
    runs: dict[str, list[float]] = {"bare": [], "fits": [], "streaming": []}
    fns = {"bare": bare_tok_s, "fits": shardscope_tok_s, "streaming": streaming_mode_tok_s}
    bare_tok_s(model, 8, args.threads)  # warm the page cache and the CPU
    for i in range(args.repeats):
        order = list(fns)[i % 3:] + list(fns)[:i % 3]
        for name in order:
            value = fns[name](model, args.tokens, args.threads)
            runs[name].append(value)
            print(f"  run {i + 1} {name:10s} {value:6.2f} tok/s", flush=True)
    b, o, st = (statistics.median(runs[k]) for k in ("bare", "fits", "streaming"))
    print(f"model {Path(model).name}, n_threads {args.threads}, {args.tokens} tokens, median of {args.repeats}")
    print(f"streaming mode (hook on, nothing evicted) ratio {st / b:.3f} ({st:.2f} tok/s vs bare {b:.2f})")
    print(f"controller overhead ratio {o / b:.3f} with the model fitting: no eval callback installed "
          f"(shardscope {o:.2f} tok/s, bare llama-cpp-python {b:.2f} tok/s)")


if __name__ == "__main__":
    main()
