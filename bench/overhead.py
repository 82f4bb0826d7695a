"""Overhead of the residency controller when the model fits the budget.

Side by side in one process, alternating so drift hits both equally: bare
llama-cpp-python (same low-level session, no eval callback, no controller) against a
full shardscope run (callback, controller, sampler). Goal: ratio ≥ 0.95.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_models import bundled_model  # noqa: E402
from engine.llama_session import LlamaSession  # noqa: E402
from engine.settings import RunSettings  # noqa: E402
from engine.streaming_run import StreamingRun  # noqa: E402

PROMPT = "The history of the printing press begins"


def bare_tok_s(model: str, n_gen: int, threads: int) -> float:
    with LlamaSession(model, n_threads=threads, n_ctx=256) as session:
        result = session.generate(PROMPT, n_gen)
    return len(result.token_s) / sum(result.token_s)


def shardscope_tok_s(model: str, n_gen: int, threads: int) -> float:
    settings = RunSettings(model_path=model, budget_mb=65536, threads=threads, n_gen=n_gen, n_ctx=256)
    with StreamingRun(settings) as run:
        return run.run().avg_ts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    model = args.model or bundled_model()
    bare, ours = [], []
    bare_tok_s(model, 8, args.threads)  # warm the page cache and the CPU
    for i in range(args.repeats):
        pair = [("bare", bare_tok_s), ("shardscope", shardscope_tok_s)]
        if i % 2:
            pair.reverse()
        for name, fn in pair:
            value = fn(model, args.tokens, args.threads)
            (bare if name == "bare" else ours).append(value)
            print(f"  run {i + 1} {name:10s} {value:6.2f} tok/s", flush=True)
    b, o = statistics.median(bare), statistics.median(ours)
    print(f"model {Path(model).name}, n_threads {args.threads}, {args.tokens} tokens, median of {args.repeats}")
    print(f"controller overhead ratio {o / b:.3f} (shardscope {o:.2f} tok/s, bare llama-cpp-python {b:.2f} tok/s)")


if __name__ == "__main__":
    main()
