"""The engine's own cost in expert streaming at 8, 24 and 61 layers of a Kimi-shaped model (issue #24).

For each layer count, in one run (the machine is shared: only ratios taken within the minute mean
anything), on a synthetic Kimi-shaped model (384 experts top-8 + 1 shared, ~5 MB a layer):

- fit: tok/s of llama.cpp alone, the model resident, no eval callback;
- hit ÷ fit: expert streaming with a cache that holds every expert, its prompt pass in llama.cpp's
  warmup mode (every expert routed, so loaded), over the decoded tokens that picked only resident
  experts (every pick a hit); fit's prompt pass is a warmup pass too: 1 ÷ median token time, ÷ fit (goal ≥ 0.9);
  the engine's cost per layer = (median hit token − median fit token) ÷ layers;
- miss ÷ disk: a run whose cache holds ~half the experts; each layer's wait for its misses
  (timed around the topk hook, from outside the streamer) against the disk's own time for the
  very same experts' slices read again right after, O_DIRECT, as many lanes as that layer missed
  experts (goal ≤ 1.2);
- sampler: the sampler thread's CPU time in its samples (CLOCK_THREAD_CPUTIME_ID) ÷ the run's wall time,
  as a share of one core (goal ≤ 0.02).

Usage: .venv/bin/python -m bench.goals.engine_cost [--layers 8,24,61] [--tokens 24] [--threads 2] [--dir DIR]
The models (~40-300 MB) are written once into --dir (default: bench/.models, git-ignored *.gguf).
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.memory_calls import page_outward
from shardscope.engine.experts.expert_io import edge_bytes, resident_dense_bytes
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.runs.run_factory import open_run

MIB = 1024 * 1024
MB_PER_LAYER = 300 / 61  # the model: 61 layers in 300 MB (13 KB experts)
PROMPT = "a"


def warm_prompt_pass(session) -> None:
    """The prompt pass in llama.cpp's warmup mode, which routes to every expert: the hit run's cache
    then holds them all and its decoded tokens pick resident experts only. The fit run does the
    same, so both decode from the same context."""
    import llama_cpp

    decode = session._decode

    def decode_warm(tokens):
        if len(tokens) == 1:
            return decode(tokens)
        llama_cpp.llama_set_warmup(session._ctx, True)
        try:
            return decode(tokens)
        finally:
            llama_cpp.llama_set_warmup(session._ctx, False)

    session._decode = decode_warm


def model_for(layers: int, folder: Path) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import like_kimi_k2

    path = folder / f"kimi-like-{layers}.gguf"
    size = MB_PER_LAYER * layers
    while not path.exists():  # few layers: the vocabulary's fixed bytes need a little more room
        try:
            write_synthetic_model(path, round(size), n_layers=layers, moe=like_kimi_k2(), seed=0)
        except ShardscopeError:
            size *= 1.15
    return str(path)


def fit_token_s(model: str, tokens: int, warm: bool, threads: int) -> tuple[float, list[int]]:
    """Median decoded-token time of llama.cpp alone (resident, no callback), and its greedy tokens."""
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(model, n_threads=threads, n_ctx=128) as session:
        if warm:
            warm_prompt_pass(session)
        session.generate(PROMPT, 4)  # first touch of the weights: not a decode's cost
        result = session.generate(PROMPT, tokens)
    return statistics.median(result.token_s), result.tokens


class SamplerCpu:
    """CPU seconds the metrics sampler's thread spends in its samples (CLOCK_THREAD_CPUTIME_ID)."""

    def __init__(self):
        from shardscope.engine.measure.metrics import MetricsSampler

        self.seconds = 0.0
        original = MetricsSampler.sample

        def sample(sampler):
            if threading.current_thread().name != "shardscope-sampler":
                return original(sampler)
            t0 = time.thread_time()
            try:
                return original(sampler)
            finally:
                self.seconds += time.thread_time() - t0

        MetricsSampler.sample = sample


SAMPLER = SamplerCpu()


def streamed(model: str, budget_mb: float, tokens: int, threads: int, warm: bool = False, timed: bool = False) -> dict:
    settings = RunSettings(model_path=model, budget_mb=budget_mb, n_gen=tokens, n_ctx=128, threads=threads,
                           prompt=PROMPT, expert_policy="lru")
    run = open_run(settings, streams="experts")
    layers_timed: list[tuple[float, tuple]] = []
    try:
        run.load()
        streamer = run.streamer
        if warm:
            warm_prompt_pass(run.session)
        if timed:  # each topk call's wait and the units it missed, seen from outside the streamer
            access, on_topk = streamer.cache.access, run.session.topk_hook
            missed: list = []

            def counting_access(*a, **kw):
                got = access(*a, **kw)
                missed.append(tuple(got.misses))
                return got

            def timed_topk(layer, ids):
                missed.clear()
                t0 = time.perf_counter()
                ok = on_topk(layer, ids)
                if missed and missed[0] and not streamer.in_prompt:
                    layers_timed.append((time.perf_counter() - t0, missed[0]))
                return ok

            streamer.cache.access = counting_access
            run.session.topk_hook = timed_topk
        cpu0, t0 = SAMPLER.seconds, time.perf_counter()
        summary = run.run()
        wall = time.perf_counter() - t0
        rows, tokens = list(run.per_token), list(run.tokens)
    finally:
        run.close()
    return {"summary": summary, "hit_dt": [r["dt"] for r in rows if r["misses"] == 0], "rows": rows,
            "layers_timed": layers_timed, "sampler_share": (SAMPLER.seconds - cpu0) / wall, "tokens": tokens}


def disk_time_for(model: str, moe, accesses: list[tuple[float, tuple]]) -> float:
    """Seconds the disk takes for the same experts' slices, each layer's at its own queue depth."""
    fd = os.open(model, os.O_RDONLY | os.O_DIRECT)
    buffers = [mmap.mmap(-1, 4 * MIB) for _ in range(16)]
    total = 0.0

    def read_unit(args) -> int:
        unit, buf = args
        done = 0
        for start, end in moe.unit_ranges(*unit):
            lo, hi = page_outward(start, end)
            done += os.preadv(fd, [memoryview(buf)[:hi - lo]], lo)
        return done

    with ThreadPoolExecutor(16) as pool:
        for _, units in accesses:
            t0 = time.perf_counter()
            list(pool.map(read_unit, zip(units, buffers)))
            total += time.perf_counter() - t0
    os.close(fd)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="8,24,61")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2,
                        help="llama.cpp threads (1 on a busy 2-core host: 2 threads wait at every node's barrier)")
    parser.add_argument("--dir", default=str(Path(__file__).resolve().parents[1] / ".models"))
    args = parser.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    print("layers  fit tok/s  hit tok/s (tokens)  hit÷fit  engine ms/layer  miss÷disk (layers)  "
          "sampler share (hit, miss run)  text same")
    for layers in [int(x) for x in args.layers.split(",")]:
        model = model_for(layers, folder)
        moe = read_moe_layout(read_layout(model))
        fit_s, fit_tokens = fit_token_s(model, args.tokens, True, args.threads)
        _, fit_short = fit_token_s(model, args.tokens, False, args.threads)
        # The cache books a unit with the pages its slices share with neighbours (expert_io.edge_bytes).
        booked = sum(moe.unit_bytes(layer) + edge_bytes(moe, layer) for layer in moe.layers) * moe.n_expert
        dense = resident_dense_bytes(moe)
        hit = streamed(model, (dense + booked) / MIB + 16, args.tokens, args.threads, warm=True)
        half = streamed(model, (dense + booked / 2) / MIB, args.tokens, args.threads, timed=True)
        hit_s = statistics.median(hit["hit_dt"]) if hit["hit_dt"] else float("nan")
        disk = disk_time_for(model, moe, half["layers_timed"])  # the same minute, right after the run
        waited = sum(w for w, _ in half["layers_timed"])
        same = run_tokens_same(hit, fit_tokens) and run_tokens_same(half, fit_short)
        print(f"{layers:6d}  {1 / fit_s:9.1f}  {1 / hit_s:9.1f} ({len(hit['hit_dt']):2d})      "
              f"{fit_s / hit_s:7.2f}  {(hit_s - fit_s) * 1000 / layers:15.3f}  "
              f"{waited / disk if disk else float('nan'):9.2f} ({len(half['layers_timed']):4d})      "
              f"{hit['sampler_share']:.4f}, {half['sampler_share']:.4f}            {same}", flush=True)


def run_tokens_same(result: dict, reference: list[int]) -> bool:
    n = min(len(result["tokens"]), len(reference))
    return n > 0 and result["tokens"][:n] == reference[:n]


if __name__ == "__main__":
    main()
