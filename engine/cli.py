"""``shardscope`` command line: bench, synth (and the GUI via the app package).

Every refusal is one line on stderr naming the file or flag and what is wrong, with a
non-zero exit code — never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import math
import sys

from engine.errors import ShardscopeError
from engine.settings import DEFAULT_PROMPT, POLICIES, RunSettings


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other refusal
        self.exit(2, f"shardscope: error: {message}\n")


def _number_type(kind: type, allow_zero: bool):
    """An argparse type: a whole or real number, > 0 (or ≥ 0), refused in one line."""
    noun = "a whole number" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        ok = value >= 0 if allow_zero else value > 0
        if not ok or (kind is float and math.isinf(value)):
            raise argparse.ArgumentTypeError(f"must be {'≥' if allow_zero else '>'} 0, got {text}")
        return value

    return parse


_positive_int = _number_type(int, allow_zero=False)
_non_negative_int = _number_type(int, allow_zero=True)
_positive_float = _number_type(float, allow_zero=False)
_non_negative_float = _number_type(float, allow_zero=True)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    d = RunSettings()
    p.add_argument("--model", help="GGUF file (default: the bundled gemma-3-270m)")
    p.add_argument("--budget-mb", type=_positive_float, default=d.budget_mb, help="weight budget (MB)")
    p.add_argument("--shard-mb", type=_positive_float, default=d.shard_mb, help="shard size (MB)")
    p.add_argument("--prefetch-depth", type=_non_negative_int, default=d.prefetch_depth)
    p.add_argument("--threads", type=_positive_int, default=d.threads)
    p.add_argument("--n-gpu-layers", type=_non_negative_int, default=d.n_gpu_layers)
    p.add_argument("--policy", choices=POLICIES, default=d.policy)
    p.add_argument("--ssd-mb-s", type=_non_negative_float, default=d.ssd_mb_s,
                   help="emulate an SSD of this read bandwidth (0: off)")
    p.add_argument("--tokens", type=_positive_int, default=d.n_gen, help="tokens to generate")
    p.add_argument("--n-ctx", type=_positive_int, default=None, help="context size (default: fits prompt+tokens)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--temperature", type=_non_negative_float, default=0.0, help="0: greedy")
    p.add_argument("--seed", type=_non_negative_int, default=0)


def settings_from_args(args) -> RunSettings:
    n_ctx = args.n_ctx or max(128, 64 * math.ceil((len(args.prompt) // 2 + args.tokens + 16) / 64))
    return RunSettings(
        model_path=args.model, budget_mb=int(args.budget_mb) if float(args.budget_mb).is_integer() else args.budget_mb,
        shard_mb=args.shard_mb, prefetch_depth=args.prefetch_depth, threads=args.threads,
        n_gpu_layers=args.n_gpu_layers, policy=args.policy, ssd_mb_s=args.ssd_mb_s, n_gen=args.tokens,
        n_ctx=n_ctx, prompt=args.prompt, temperature=args.temperature, seed=args.seed,
    )


def _print_summary(summary) -> None:
    print(f"model      {summary.model_filename}  ({summary.model_size_mb:.0f} MB, {summary.n_layers} layers, "
          f"{summary.n_shards} shards, globals {summary.globals_mb:.0f} MB, pinned {summary.pinned_mb:.0f} MB)")
    print(f"settings   budget {summary.budget_mb:.0f} MB, shard {summary.shard_mb:g} MB, prefetch depth "
          f"{summary.prefetch_depth}, policy {summary.policy}, threads {summary.n_threads}, "
          f"n_gpu_layers {summary.n_gpu_layers}, emulated SSD "
          f"{'off' if not summary.emulated_ssd_mb_s else f'{summary.emulated_ssd_mb_s:g} MB/s'}")
    if summary.n_gpu_layers_requested and not summary.n_gpu_layers:
        print(f"note       n_gpu_layers {summary.n_gpu_layers_requested} requested, but this llama.cpp build "
              f"has no GPU offload: ran with 0")
    print(f"speed      {summary.avg_ts:.2f} tok/s (±{summary.stddev_ts:.2f}), TTFT {summary.ttft_ms:.0f} ms, "
          f"{summary.n_gen} tokens")
    print(f"memory     peak RSS {summary.peak_rss_mb:.0f} MB, resident weights {summary.resident_weights_mb:.0f} MB")
    print(f"disk       {summary.read_mb_per_token:.1f} MB read/token, {summary.ssd_mb_s:.0f} MB/s, "
          f"hit rate {summary.hit_rate:.1f} %")
    print(f"mechanism  load {summary.load_mechanism}, evict {summary.evict_mechanism}")
    if summary.projected_bound:
        print(f"projection {summary.device}: {summary.projected_ts:.3g} tok/s ({summary.projected_bound}-bound)")


def cmd_bench(args) -> int:
    from engine.bench_command import run_bench

    settings = settings_from_args(args)
    reports = []
    summary, text = run_bench(settings, csv_path=args.csv, timeline_path=args.timeline, device=args.device,
                              on_verify=reports.append if getattr(args, "verify", False) else None)
    if not args.quiet:
        print(f"text       {text!r}")
    _print_summary(summary)
    if reports:
        from engine.verify import format_report

        print("\n".join(format_report(reports[0])))
        return 0 if reports[0].ok else 1
    return 0


def cmd_synth(args) -> int:
    from engine.synth import write_synthetic_model

    last = [-1]

    def progress(fraction: float) -> None:
        pct = int(fraction * 100)
        if pct >= last[0] + 10 and not args.quiet:
            last[0] = pct
            print(f"  {pct:3d} %", file=sys.stderr)

    info = write_synthetic_model(args.out, args.size_mb, n_layers=args.layers, seed=args.seed, progress=progress)
    print(f"wrote {info.path}: {info.size_bytes / 2**20:.0f} MB, {info.n_layers} layers, "
          f"n_embd {info.n_embd}, n_ff {info.n_ff}, vocab {info.n_vocab}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shardscope", description="Stream LLM weights from SSD under a memory budget.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    bench = sub.add_parser("bench", help="one headless run; prints and writes what happened")
    add_run_arguments(bench)
    bench.add_argument("--csv", help="append one summary row to this CSV")
    bench.add_argument("--timeline", help="write the 10 Hz samples to this CSV")
    bench.add_argument("--device", help="project tok/s onto this device (e.g. iphone-16-pro)")
    bench.add_argument("--quiet", action="store_true")
    bench.add_argument("--verify", action="store_true",
                       help="print each figure next to an independent source (another process's /proc "
                            "readings, llama.cpp's perf counters); exit 1 if one is off by > 5 %%")
    bench.set_defaults(func=cmd_bench)
    synth = sub.add_parser("synth", help="write a synthetic GGUF model of a chosen size")
    synth.add_argument("--size-mb", type=_positive_float, required=True)
    synth.add_argument("--out", required=True)
    synth.add_argument("--layers", type=_positive_int, default=None)
    synth.add_argument("--seed", type=_non_negative_int, default=0)
    synth.add_argument("--quiet", action="store_true")
    synth.set_defaults(func=cmd_synth)
    from engine.cli_search import register  # sweep, tune, plan: their own module

    register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except ShardscopeError as exc:
        print(f"shardscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shardscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `shardscope plan … | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except MemoryError:
        print("shardscope: error: out of memory", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
