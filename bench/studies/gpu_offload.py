"""n_gpu_layers on a GPU build of llama.cpp: tok/s up, host memory down, streaming intact.

For each requested n_gpu_layers this drives one ``StreamingRun`` (the same class the
CLI's ``bench`` uses) and prints one line: requested and effective n_gpu_layers,
decode tok/s, time to first token, peak RSS, resident weights (mincore over the mapping),
MB read per token and hit rate, plus the model buffer sizes llama.cpp logged (how
many MB it put on the GPU and how many stayed as a view of the file). Runs use a
budget the whole model fits ("fit"); ``--stream-layers`` adds runs with a budget of
about half the host bytes of that plan, so layers stream from disk while the last
layers sit on the GPU. The final lines give tok/s at the most layers ÷ tok/s at 0,
and whether greedy tokens match the first run's.

Each line also says how many layers the shard plan left out of the host plan and how
many repeating layers llama.cpp reported offloading ("offloading N repeating layers");
a MISMATCH line follows when they differ. (On an H200 with llama.cpp 0.3.36's vendor
tree, n_gpu_layers N put the output layer and N-1 repeating layers on the GPU.)

On a CPU-only build ``gpu_offload_supported()`` is False and every effective value
is 0 — the script still runs and says so. With a CUDA 13 / g++ 13 build of the
libraries, libggml-cuda.so exported libstdc++ template instances that libllama bound
to, and model loading segfaulted in ``llama_model::print_info``; running with
``LD_PRELOAD=<path of libstdc++.so.6>`` avoided it.

    python -m bench.studies.gpu_offload --synth-mb 2048 --synth-layers 32 --layers 0,8,16,24,32,33
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from collections import deque
from pathlib import Path

from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.budget_minimum import dense_minimum
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.stream.streaming_run import prepare_plan

_BUFFER = re.compile(r"(\S+) model buffer size\s*=\s*([\d.]+) MiB")
_REPEATING = re.compile(r"offloading (\d+) repeating layers to GPU")


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()] if text else []


def _model(args) -> str:
    if args.model:
        return args.model
    from shardscope.engine.synth.synth import write_synthetic_model

    out = Path(args.synth_out or f"/tmp/shardscope-gpu-{args.synth_mb}mb-{args.synth_layers}l.gguf")
    if not out.exists():
        t0 = time.perf_counter()
        info = write_synthetic_model(out, args.synth_mb, n_layers=args.synth_layers, seed=7)
        print(f"synth: wrote {out} ({info.size_bytes / MIB:.0f} MB, {info.n_layers} layers, n_embd {info.n_embd}) "
              f"in {time.perf_counter() - t0:.1f} s", flush=True)
    return str(out)


def _buffers() -> dict[str, float]:
    """Model buffer sizes llama.cpp logged during the last load (e.g. CUDA0, CPU_Mapped)."""
    from shardscope.engine.stream import llama_session

    found: dict[str, float] = {}
    for match in _BUFFER.finditer("".join(llama_session._log_tail)):
        found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(2))
    return found


def _llama_offload() -> tuple[int | None, bool]:
    """What llama.cpp said it offloaded in the last load: (repeating layers, output layer)."""
    from shardscope.engine.stream import llama_session

    log = "".join(llama_session._log_tail)
    found = _REPEATING.findall(log)
    return (int(found[-1]) if found else None), "offloading output layer to GPU" in log


def one_run(base: RunSettings, n_gpu_layers: int, budget_mb: int | None, label: str) -> dict:
    settings = base.with_changes(n_gpu_layers=n_gpu_layers)
    _, plan = prepare_plan(settings.with_changes(budget_mb=1_048_576))
    host_mb = plan.host_bytes / MIB
    if budget_mb is None:  # stream: about half of what stays on the host, never below the minimum
        min_mb = dense_minimum(plan, settings.prefetch_depth).bytes / MIB
        budget_mb = int(math.ceil(max(host_mb / 2, min_mb + 1)))
    settings = settings.with_changes(budget_mb=budget_mb)
    tokens: list[int] = []
    with open_run(settings, streams="layers") as run:
        t0 = time.perf_counter()
        run.load()
        load_s = time.perf_counter() - t0
        buffers = _buffers()
        llama_repeating, llama_output = _llama_offload()
        generate = run.session.generate

        def capture(*a, **kw):
            result = generate(*a, **kw)
            tokens[:] = result.tokens
            return result

        run.session.generate = capture
        s = run.run()
        hooked = run.session.hook_active
    return {"label": label, "requested": s.n_gpu_layers_requested, "effective": s.n_gpu_layers,
            "n_layers": s.n_layers, "budget_mb": round(s.budget_mb), "host_mb": round(host_mb, 1),
            "offloaded_mb": round(plan.offloaded_bytes / MIB, 1), "hooked": hooked,
            "plan_offloaded_layers": len(plan.offloaded_layers), "llama_repeating_on_gpu": llama_repeating,
            "llama_output_on_gpu": llama_output,
            "avg_ts": s.avg_ts, "stddev_ts": s.stddev_ts, "ttft_ms": s.ttft_ms, "load_s": round(load_s, 2),
            "peak_rss_mb": s.peak_rss_mb, "resident_weights_mb": s.resident_weights_mb,
            "read_mb_per_token": s.read_mb_per_token, "streamed_mb_per_token": s.streamed_mb_per_token,
            "cache_hit_rate": s.cache_hit_rate, "wait_ms_per_token": s.wait_ms_per_token,
            "llama_eval_ms_per_token": s.llama_eval_ms_per_token, "buffers_mb": buffers,
            "tokens": tokens, "text": s.text}


def _line(r: dict) -> str:
    bufs = " ".join(f"{k}={v:.0f}" for k, v in sorted(r["buffers_mb"].items())) or "-"
    return (f"{r['label']:6s} n_gpu_layers {r['requested']:3d} (effective {r['effective']:3d}/{r['n_layers']}) "
            f"budget {r['budget_mb']:7d} MB host {r['host_mb']:7.1f} MB  avg_ts {r['avg_ts']:8.2f} "
            f"(±{r['stddev_ts']:.2f})  ttft_ms {r['ttft_ms']:8.1f}  peak_rss_mb {r['peak_rss_mb']:7.1f}  "
            f"resident_weights_mb {r['resident_weights_mb']:7.1f}  read_mb_per_token {r['read_mb_per_token']:7.2f}  "
            f"cache_hit_rate {r['cache_hit_rate']:6.4f}  hook {'on' if r['hooked'] else 'off'}  buffers_mb [{bufs}]"
            f"  layers on GPU: plan {r['plan_offloaded_layers']}, llama.cpp "
            f"{'-' if r['llama_repeating_on_gpu'] is None else r['llama_repeating_on_gpu']}"
            f"{' + output' if r['llama_output_on_gpu'] else ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="GGUF to run (default: a synthetic model, see --synth-mb)")
    parser.add_argument("--synth-mb", type=int, default=2048)
    parser.add_argument("--synth-layers", type=int, default=32)
    parser.add_argument("--synth-out")
    parser.add_argument("--layers", default="0,8,16,24,32", help="n_gpu_layers values, budget the model fits")
    parser.add_argument("--stream-layers", default="0,16", help="n_gpu_layers values run at ~half the host bytes")
    parser.add_argument("--budget-mb", type=int, default=1_048_576, help="budget of the fit runs")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--n-gen", type=int, default=32)
    parser.add_argument("--stream-n-gen", type=int, default=16, help="tokens of the streaming runs (disk-bound)")
    parser.add_argument("--shard-mb", type=int, default=64)
    parser.add_argument("--prefetch-depth", type=int, default=2)
    parser.add_argument("--json", help="write every run's numbers (and tokens) to this file")
    args = parser.parse_args()

    import llama_cpp

    from shardscope.engine.stream import llama_session
    from shardscope.engine.stream.llama_session import gpu_offload_supported

    # The engine keeps the last 400 log lines; a load logs more, and the buffer sizes come early.
    llama_session._log_tail = deque(maxlen=50_000)

    supported = gpu_offload_supported()
    print(f"llama-cpp-python {llama_cpp.__version__} from {Path(llama_cpp.__file__).parent}; "
          f"gpu_offload_supported() = {supported}", flush=True)
    model = _model(args)
    print(f"model {model} ({os.path.getsize(model) / MIB:.0f} MB), threads {args.threads}, n_gen {args.n_gen}, "
          f"shard {args.shard_mb} MB, prefetch depth {args.prefetch_depth}", flush=True)
    base = RunSettings(model_path=model, threads=args.threads, n_gen=args.n_gen, shard_mb=args.shard_mb,
                       prefetch_depth=args.prefetch_depth, n_ctx=128)
    runs: list[dict] = []
    plan = [(n, args.budget_mb, "fit") for n in _int_list(args.layers)]
    plan += [(n, None, "stream") for n in _int_list(args.stream_layers)]
    for n, budget, label in plan:
        settings = base if label == "fit" else base.with_changes(n_gen=args.stream_n_gen)
        try:
            r = one_run(settings, n, budget, label)
        except Exception as exc:  # report and go on: one failing config must not hide the rest
            print(f"{label:6s} n_gpu_layers {n:3d} FAILED: {type(exc).__name__}: {exc}", flush=True)
            continue
        runs.append(r)
        print(_line(r), flush=True)

    fit = [r for r in runs if r["label"] == "fit"]
    if fit:
        lo = min(fit, key=lambda r: r["requested"])
        hi = max(fit, key=lambda r: r["requested"])
        ratio = hi["avg_ts"] / lo["avg_ts"] if lo["avg_ts"] else float("nan")
        print(f"ratio: tok/s at n_gpu_layers {hi['requested']} (effective {hi['effective']}) ÷ at "
              f"{lo['requested']} = {hi['avg_ts']:.2f} / {lo['avg_ts']:.2f} = {ratio:.2f}x; "
              f"resident weights {lo['resident_weights_mb']:.0f} → {hi['resident_weights_mb']:.0f} MB, "
              f"peak RSS {lo['peak_rss_mb']:.0f} → {hi['peak_rss_mb']:.0f} MB")
    for r in runs:
        if r["llama_repeating_on_gpu"] is not None and r["llama_repeating_on_gpu"] != r["plan_offloaded_layers"]:
            print(f"MISMATCH {r['label']} n_gpu_layers {r['requested']}: the shard plan leaves out "
                  f"{r['plan_offloaded_layers']} layers, llama.cpp put {r['llama_repeating_on_gpu']} repeating layers"
                  f"{' + the output layer' if r['llama_output_on_gpu'] else ''} on the GPU")
    if runs:
        ref = runs[0]
        for r in runs[1:]:
            same = next((i for i, (a, b) in enumerate(zip(ref["tokens"], r["tokens"])) if a != b),
                        min(len(ref["tokens"]), len(r["tokens"])))
            n = min(len(ref["tokens"]), len(r["tokens"]))
            verdict = f"all {n} identical to" if same == n else f"first {same} of {n} equal to"
            print(f"tokens {r['label']} n_gpu_layers {r['requested']}: "
                  f"{verdict} "
                  f"{ref['label']} n_gpu_layers {ref['requested']}")
        print(f"text ({ref['label']} n_gpu_layers {ref['requested']}): {ref['text']!r}")
        print(f"tokens: {ref['tokens']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu_offload_supported": supported, "model": model,
                                               "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
