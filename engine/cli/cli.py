"""``shardscope`` command line: bench, synth (and the GUI via the app package).

Every refusal is one line on stderr naming the file or flag and what is wrong, with a
non-zero exit code — never a traceback for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import bytes_text, plural
from shardscope.engine.cli.cli_args import (
    add_output_arguments,
    add_run_arguments,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    settings_from_args,
)
from shardscope.engine.knobs.knobs import describe
from shardscope.engine.measure.metric_registry import from_memory_line


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, like every other refusal
        self.exit(2, f"shardscope: error: {message}\n")


def _percent(fraction: float, missing: str = "n/a (no layer access measured)") -> str:
    """A fraction as a percentage; NaN (nothing measured) reads as ``missing``."""
    return missing if math.isnan(fraction) else f"{100 * fraction:.1f} %"


def file_size_text(size_mib: float) -> str:
    """A model file's size the way `size` prints it (decimal MB/GB), so one file reads one number."""
    from shardscope.engine.base.units import MIB

    return bytes_text(size_mib * MIB)


def _print_summary(summary) -> None:
    print(f"model      {summary.model_filename}  ({file_size_text(summary.model_size_mb)}, "
          f"{plural(summary.n_layers, 'layer')}, {plural(summary.n_shards, 'shard')}, globals "
          f"{summary.globals_mb:.0f} MiB, pinned {summary.pinned_mb:.0f} MiB)")
    print(f"settings   {describe(summary)}")
    if summary.n_gpu_layers_requested and not summary.n_gpu_layers:
        print(f"note       n_gpu_layers {summary.n_gpu_layers_requested} requested, but this llama.cpp build "
              f"has no GPU offload: ran with 0")
    # ± here is the spread between this run's tokens; the llama-bench table's ± is between
    # repetitions (-r), 0 for one: two different figures, so each says which it is.
    # The first token comes out of the prompt pass; tok/s times the ones after it (llama-bench's tgN).
    print(f"speed      {summary.avg_ts:.2f} tok/s over {plural(summary.n_gen - 1, 'decoded token')} (tokens vary "
          f"±{summary.stddev_ts:.2f}), TTFT {summary.ttft_ms:.0f} ms for the prompt and the first token, "
          f"{plural(summary.n_gen, 'token')} in all")
    print(f"memory     peak RSS {summary.peak_rss_mb:.0f} MiB, resident weights {summary.resident_weights_mb:.0f} MiB")
    print(f"disk       {summary.read_mb_per_token:.1f} MiB read/token, {summary.ssd_mb_s:.0f} MB/s, "
          f"cache hit rate {_percent(summary.cache_hit_rate)}, on time {_percent(summary.on_time_rate)}")
    print(f"from RAM   {from_memory_line(summary.cache_hit_rate)}")
    print(f"mechanism  load {summary.load_mechanism}, evict {summary.evict_mechanism}; I/O path {summary.io_path}")
    if "SHARED with" in summary.evict_mechanism:  # engine/stream/model_lock.py
        print("warning    another run mapped this model during this one: eviction was shared, so resident "
              "weights, hit rate and bytes read include its work", file=sys.stderr)
    if getattr(summary, "n_expert", 0):
        _print_experts(summary)
    if summary.projected_bound:
        from shardscope.engine.devices.devices import get_device
        from shardscope.engine.devices.projection import inputs_provenance
        from shardscope.engine.devices.run_projection import projection_for

        # bound_text names the SSD's part too: "ssd-bound (latency)" or "(bandwidth)"
        bound = projection_for(summary, summary.device).bound_text
        print(f"projection {summary.device}: {summary.projected_ts:.3g} tok/s ({bound}; "
              f"{inputs_provenance(get_device(summary.device))})")


def _print_experts(s) -> None:
    def pct(x):
        return _percent(x, "n/a")

    print(f"experts    {s.n_expert} per layer, top-{s.n_expert_used}; cache {s.expert_cache_mb:.0f} MiB "
          f"({s.expert_policy}, speculation {'on' if s.expert_speculation else 'off'}), hit rate "
          f"{pct(s.expert_hit_rate)} ({s.expert_hits} hits, {s.expert_misses} misses)")
    # The kernel's read count next to the streamer's loads, with what neither load explains, so the
    # parts add up to the total (they did not: "6.29 read (dense 0.00 + experts 3.34)").
    other = s.read_mb_per_token - s.dense_mb_per_token - s.expert_mb_per_token
    print(f"per token  {s.read_mb_per_token:.2f} MiB read = experts {s.expert_mb_per_token:.2f} + dense "
          f"{s.dense_mb_per_token:.2f} + other {other:.2f} (read, not loaded by the streamer); waiting for experts "
          f"{s.expert_wait_ms_per_token:.1f} ms, computing "
          f"{s.compute_ms_per_token:.1f} ms")
    if s.expert_advice:
        print(f"note       {s.expert_advice}")  # names the policy, the trace replayed and the margin
    if s.expert_speculation:
        print(f"guesses    accuracy {pct(s.spec_accuracy)}, misses hidden {pct(s.spec_hidden_share)}")
    if s.hash_picks_ahead:  # deepseek4's hash-routed layers (engine/experts/hash_prefetch.py)
        print(f"hash       {s.hash_picks_ahead} picks known ahead of their layer, "
              f"{s.hash_misses_hidden} misses hidden, "
              f"{pct(s.hash_ready_share)} of tokens with every hash pick loaded before its layer")
    if s.llama_kv_mb or s.llama_state_mb:  # llama.cpp's own figures: the RSS beyond the weights
        print(f"context    llama.cpp's KV cache {s.llama_kv_mb:.2f} + recurrent/compressed state "
              f"{s.llama_state_mb:.2f} "
              f"+ buffers {s.llama_buffers_mb:.2f} MiB (its log, at context creation)")
    if s.trace_path:
        print(f"trace      {s.trace_path}")


DEFAULT_SSD_QUEUE_DEPTH = 32


def _check_emulation_flags(args, settings) -> None:
    """--ssd-latency-us and --ssd-queue-depth shape the emulated SSD: without one
    (--ssd-mb-s) they would be dropped in silence."""
    if settings.ssd_mb_s:
        return
    if args.ssd_latency_us:
        raise ShardscopeError(f"--ssd-latency-us {args.ssd_latency_us:g}: only applies with --ssd-mb-s "
                              "(the emulated SSD); add --ssd-mb-s RATE or leave it out")
    if args.ssd_queue_depth is not None:
        raise ShardscopeError(f"--ssd-queue-depth {args.ssd_queue_depth}: only applies with --ssd-mb-s "
                              "(the emulated SSD); add --ssd-mb-s RATE or leave it out")


def cmd_bench(args) -> int:
    from shardscope.engine.cli.interrupt import run_interruptibly
    from shardscope.engine.cli.progress_line import ProgressLine
    from shardscope.engine.output.llama_bench_output import print_rows, utc_now
    from shardscope.engine.runs.bench_command import run_repetitions
    from shardscope.engine.runs.stop_signal import StopSignal

    settings = settings_from_args(args)
    from shardscope.engine.stream.ssd_rate_limiter import configure_emulation

    _check_emulation_flags(args, settings)
    if args.accept_unchecked and not args.verify:
        raise ShardscopeError("--accept-unchecked: only applies with --verify; add --verify or leave it out")
    configure_emulation(args.ssd_latency_us,
                        args.ssd_queue_depth or DEFAULT_SSD_QUEUE_DEPTH)  # the emulated SSD beyond its bandwidth
    started = utc_now()
    reports = []
    stop, line = StopSignal(), ProgressLine(quiet=args.quiet)  # Ctrl-C stops the run; one progress line
    try:
        summaries = run_interruptibly(lambda: run_repetitions(
            settings, args.repetitions, csv_path=args.csv, timeline_path=args.timeline, device=args.device,
            trace_path=args.trace, on_verify=reports.append if args.verify else None, on_sample=line.on_sample,
            stop=stop), stop, before_exit=line.close)
    finally:
        line.close()
    human = sys.stdout if args.output == "md" else sys.stderr  # stdout carries only the rows
    with contextlib.redirect_stdout(human):
        if not args.quiet:
            print(f"text       {summaries[-1].text!r}")
        _print_summary(summaries[-1])
    print_rows(settings, [(summaries, started)], args.output)
    if reports:  # last, so the verdict is the last line a reader sees
        from shardscope.engine.runs.verify_report import format_report

        print("\n".join(format_report(reports[0], accept_unchecked=args.accept_unchecked)), file=human)
        from shardscope.engine.runs.verify_cost import cost_line, watch_cost

        print(cost_line(watch_cost(settings, reports[0].summary)), file=human)  # what the watch cost (issue 48)
    if reports:
        from shardscope.engine.runs.verify_report import exit_code

        return exit_code(reports[0], accept_unchecked=args.accept_unchecked)
    return 0


def cmd_synth(args) -> int:
    import time

    from shardscope.engine.cli.progress_line import ProgressLine
    from shardscope.engine.measure.phase_progress import PhaseProgress
    from shardscope.engine.synth.synth import write_synthetic_model

    # A large model takes minutes to write: one progress line (bytes, rate, estimate) on a terminal.
    line, phase, shown = ProgressLine(quiet=args.quiet), PhaseProgress(), [0.0]
    total = int(args.size_mb * 2**20)
    phase.begin("synth", total_bytes=total)

    def progress(fraction: float) -> None:
        phase.report(fraction=fraction, done_bytes=int(fraction * total))
        now = time.perf_counter()
        if now - shown[0] >= 0.1 or fraction >= 1.0:
            shown[0] = now
            line.show(phase.snapshot())

    moe = _moe_spec(args)
    try:
        info = write_synthetic_model(args.out, args.size_mb, n_layers=args.layers, seed=args.seed,
                                     progress=progress, moe=moe)
    except ShardscopeError as exc:
        raise ShardscopeError(_synth_flags_named(str(exc), args)) from None
    finally:
        line.close()
    experts = (f", {info.n_expert} experts (top-{info.n_expert_used}"
               f"{f', {info.n_shared_experts} shared' if info.n_shared_experts else ''}), arch {info.architecture}"
               if info.n_expert else "")
    print(f"wrote {info.path}: {bytes_text(info.size_bytes)}, {plural(info.n_layers, 'layer')}, "
          f"n_embd {info.n_embd}, n_ff {info.n_ff}, vocab {info.n_vocab}{experts}")
    return 0


_MOE_FLAGS = {"experts": "--experts", "experts_used": "--experts-used", "shared_experts": "--shared-experts",
              "routing_skew": "--routing-skew", "routing": "--routing", "arch": "--arch", "quant": "--quant",
              "like": "--like"}


def _moe_spec(args):
    """The MoE shape from --moe and its flags; those flags without --moe are refused."""
    given = [flag for key, flag in _MOE_FLAGS.items() if getattr(args, key) is not None]
    if not args.moe:
        if given:
            raise ShardscopeError(f"{given[0]} needs --moe")
        return None
    from shardscope.engine.synth.synth_moe import PRESETS, MoeSpec, defaults_for

    # --like picks a real model's ratios: a flag that changes them would write a model under the
    # preset's name that is not that shape, so it is refused (the skew is no ratio: it may be set).
    if args.like:
        preset = PRESETS[args.like]()
        for key in ("experts", "experts_used", "shared_experts", "arch"):
            value = getattr(args, key)
            if value is not None and value != getattr(preset, key):
                raise ShardscopeError(f"{_MOE_FLAGS[key]} {value}: --like {args.like} fixes it at "
                                      f"{getattr(preset, key)}; leave it out, or drop --like to choose the shape")
    d = PRESETS[args.like]() if args.like else defaults_for(args.arch)
    return MoeSpec(**{key: getattr(d, key) if getattr(args, key) is None else getattr(args, key)
                      for key in _MOE_FLAGS if key != "like"})


# The MoE shape's field names in synth's refusals, as the flags that set them (the Python API
# keeps the field names); a value the user did not give is the arch's default and is said so.
_SYNTH_FIELDS = ("experts_used", "shared_experts", "routing_skew", "experts")  # longest first: "experts" last


def _synth_flags_named(message: str, args) -> str:
    import re

    for key in _SYNTH_FIELDS:
        flag = _MOE_FLAGS[key]
        given = getattr(args, key, None) is not None
        # "experts_used must …", "to experts (4)", "shared_experts ≥ 1"
        pattern = re.compile(rf"(?<![\w-]){key}(?= must| \(| ≥)")  # the field, not the word in prose
        if pattern.search(message):
            message = pattern.sub(flag if given or not args.moe else f"{flag} (default)", message, count=1)
            message = pattern.sub(flag, message)
    return message


# what synth --arch offers; qwen3next is refused with the reason (not written yet)
SYNTH_ARCHES = ("llama", "qwen2moe", "deepseek2", "qwen3moe", "gpt-oss", "glm4moe", "llama4", "kimi-k2",
                "deepseek3", "gemma4", "qwen3next", "kimi-k3", "deepseek4", "qwen35moe", "glm5-next", "minimax-m3")


def _mb_list(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MiB sizes separated by commas, got {text!r}") from None
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"sizes must be > 0 MiB, got {text!r}")
    if any(v > MAX_CACHE_MB for v in values):
        raise argparse.ArgumentTypeError(f"sizes must be at most 2^40 MiB (1 EiB), got {text!r}")
    return values


MAX_CACHE_MB = 2.0 ** 40  # far past any trace's experts; larger sizes overflow the byte counts


def cmd_replay(args) -> int:
    from pathlib import Path

    from shardscope.engine.experts.foreign_traces import load_trace
    from shardscope.engine.experts.replay import REPLAY_POLICIES, format_rows, replay

    trace = load_trace(args.trace)
    if getattr(args, "stats", False):
        print_trace_stats(trace, args.trace)
        if args.cache_mb is None:
            return 0
    if args.cache_mb is None:
        raise ShardscopeError("replay: give --cache-mb sizes to replay (or --stats for the routing statistics)")
    if args.policy is None:  # every online policy and the optimum they are measured against
        policies = list(REPLAY_POLICIES)
    else:
        policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not policies:
        raise ShardscopeError(f"--policy: give at least one policy ({', '.join(REPLAY_POLICIES)}), got {args.policy!r}")
    rows = replay(trace, args.cache_mb, policies, where=args.trace)
    print(format_rows(rows, Path(trace.header.model).name or Path(args.trace).name, trace.header.hash_layers))
    from shardscope.engine.experts.policy_advice import best_lines
    for line in best_lines(rows, Path(args.trace).name):  # the trace and the margin (a tie under 1 point)
        print(line)
    return 0


def print_trace_stats(trace, where: str) -> None:
    from pathlib import Path

    from shardscope.engine.experts.trace_stats import format_stats, trace_stats

    print(format_stats(trace_stats(trace, where), Path(trace.header.model).name or Path(where).name))


def cmd_trace_stats(args) -> int:
    from shardscope.engine.experts.foreign_traces import load_trace

    print_trace_stats(load_trace(args.trace), args.trace)
    return 0


def cmd_calibrate(args) -> int:
    from shardscope.engine.devices.calibrate import calibrate
    from shardscope.engine.runs.calibration_reference import measure_here

    fit, path = calibrate(args.device, args.results, reference_path=args.reference,
                          measure_here=lambda model, where: measure_here(model, where, threads=args.threads,
                                                                         tokens=args.tokens))
    error = "n/a (one observation)" if math.isnan(fit.held_out_error_pct) else f"{fit.held_out_error_pct:.1f} %"
    print(f"compute_scale {fit.compute_scale:.4g} ({fit.basis} rate per core: {fit.device_rate_per_core:.4g} "
          f"tok/s on {args.device} vs {fit.host_rate_per_core:.4g} here); held-out error {error}")
    print("dram_mb_s     " + (f"{fit.dram_mb_s:.6g} ({fit.dram_note})" if fit.dram_mb_s is not None
                               else fit.dram_note))
    print(f"saved to {path}")
    return 0


def _gui_not_here(args) -> int:
    raise ShardscopeError("gui: start the window with the `shardscope` command (app.main), not engine.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="shardscope", description="Stream LLM weights from SSD under a memory budget. "
                     "`shardscope` alone, or `shardscope gui [MODEL.gguf]`, opens the workbench window.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    # Listed so --help names the window; app.main starts it before this parser is reached.
    gui = sub.add_parser("gui", help="open the workbench window (shardscope gui [MODEL.gguf])")
    gui.add_argument("model", nargs="?", help="GGUF file to open (default: the bundled gemma-3-270m)")
    gui.set_defaults(func=_gui_not_here)
    bench = sub.add_parser("bench", help="one headless run; prints and writes what happened")
    add_run_arguments(bench)
    bench.add_argument("--csv", help="append one summary row to this CSV")
    bench.add_argument("--timeline", help="write the 10 Hz samples to this CSV")
    bench.add_argument("--device", help="project tok/s onto this device (e.g. iphone-16-pro)")
    bench.add_argument("--quiet", action="store_true")
    add_output_arguments(bench)
    bench.add_argument("--trace", help="MoE: write the routing trace (JSON lines) here, for shardscope replay")
    bench.add_argument("--verify", action="store_true",
                       help="print each figure next to an independent source (another process's /proc "
                            "readings, llama.cpp's perf counters); exit 1 if a compared pair is off by > 5 %%, "
                            "exit 3 if a pair had nothing to compare (NOT CHECKED, e.g. nothing read while "
                            "generating) and the rest agree")
    bench.add_argument("--accept-unchecked", action="store_true",
                       help="with --verify: exit 0 when the compared pairs agree even if some pair was not "
                            "checked (the report says it was accepted)")
    bench.add_argument("--ssd-latency-us", type=non_negative_float, default=0.0,
                       help="with --ssd-mb-s: the emulated SSD's latency per request (default 0)")
    bench.add_argument("--ssd-queue-depth", type=positive_int, default=None,
                       help="with --ssd-mb-s: requests the emulated SSD keeps in flight (default 32)")
    bench.set_defaults(func=cmd_bench)
    synth = sub.add_parser("synth", help="write a synthetic GGUF model of a chosen size")
    synth.add_argument("--size-mb", type=positive_float, required=True)
    synth.add_argument("--out", required=True)
    synth.add_argument("--layers", type=positive_int, default=None)
    synth.add_argument("--seed", type=non_negative_int, default=0)
    synth.add_argument("--quiet", action="store_true")
    synth.add_argument("--moe", action="store_true", help="a mixture-of-experts model (Mixtral-style)")
    synth.add_argument("--experts", type=positive_int, default=None, help="experts per layer (default 64)")
    synth.add_argument("--experts-used", type=positive_int, default=None, help="experts per token (default 8)")
    synth.add_argument("--shared-experts", type=non_negative_int, default=None,
                       help="always-used experts per layer (default: the arch's own, e.g. 0 for llama, 1 for "
                            "qwen2moe and kimi-k2)")
    synth.add_argument("--routing-skew", type=non_negative_float, default=None,
                       help="make some experts win more often (0: uniform router)")
    synth.add_argument("--routing", choices=("real", "uniform", "flat"), default=None,
                       help="real (default): routing with real routers' reuse and popularity, llama.cpp still "
                            "picking; flat: the same reuse, no popularity (a router trained flat, as Kimi K3's "
                            "quantile balancing); uniform: random router rows (docs/synthetic-routing.md)")
    synth.add_argument("--arch", choices=SYNTH_ARCHES, default=None,
                       help="MoE architecture (default: llama, or qwen2moe with shared experts); qwen3moe, gpt-oss, "
                            "glm4moe, llama4, gemma4, kimi-k2, deepseek3 have that model's expert counts and tensors; "
                            "deepseek2 is the Kimi K2 shape: MLA, dense first layer, sigmoid router")
    synth.add_argument("--quant", choices=("q8_0", "q4_k_m", "mxfp4"), default=None,
                       help="experts' format: q8_0, q4_k_m (gate/up Q4_K, down Q6_K) or mxfp4 (gpt-oss's default)")
    synth.add_argument("--like", choices=("kimi-k2",), default=None,
                       help="a real model's expert ratios at --size-mb: kimi-k2 = deepseek2, 384 "
                            "experts, top-8, 1 shared")
    synth.set_defaults(func=cmd_synth)
    cal = sub.add_parser("calibrate", help="fit a device's speed from llama-bench rows measured on it",
                         description="Reads llama-bench -o json|jsonl|csv rows of a known model measured on the "
                                     "device, pairs them with this machine's rows for the same model (--reference, "
                                     "or a run of the bundled model here) and stores the fitted per-core speed "
                                     "(and DRAM bandwidth where the rows allow) in your device file. "
                                     "See docs/calibration.md.")
    cal.add_argument("results", help="llama-bench result file from the device (JSON, JSONL or CSV)")
    cal.add_argument("--device", required=True, help="device preset id, e.g. iphone-16-pro")
    cal.add_argument("--reference", help="this machine's rows for the same model (default: run the bundled model)")
    cal.add_argument("--threads", type=positive_int, default=2, help="threads of the run here (no --reference)")
    cal.add_argument("--tokens", type=positive_int, default=16, help="tokens of the run here (no --reference)")
    cal.set_defaults(func=cmd_calibrate)
    replay_p = sub.add_parser("replay", help="replay a routing trace through expert-cache policies and sizes")
    replay_p.add_argument("trace", help="routing trace: bench --trace (JSON lines), BigMoeOnEdge's route_trace v1 CSV, "
                                        "or a token,layer,expert CSV (docs/trace-formats.md)")
    replay_p.add_argument("--cache-mb", type=_mb_list, default=None,
                          help="expert cache sizes, e.g. 50,100,200 (needed unless --stats)")
    replay_p.add_argument("--policy", default=None,
                          help="policies, e.g. lru,lfu (default: every policy and 'optimal', Belady's limit)")
    replay_p.add_argument("--stats", action="store_true", help="print the trace's routing statistics per layer "
                          "(lag-1/lag-8 reuse, static top-k, distinct experts, hottest-8 share)")
    replay_p.set_defaults(func=cmd_replay)
    stats_p = sub.add_parser("trace-stats", help="a routing trace's statistics (same as replay TRACE --stats)")
    stats_p.add_argument("trace", help="routing trace: bench --trace (JSON lines), BigMoeOnEdge's route_trace v1 CSV, "
                                       "or a token,layer,expert CSV (docs/trace-formats.md)")
    stats_p.set_defaults(func=cmd_trace_stats)
    from shardscope.engine.cli import cli_devices, cli_search  # sweep, tune, size; devices: their own modules

    cli_search.register(sub)
    cli_devices.register(sub)
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
    except BrokenPipeError:  # `shardscope size … | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except MemoryError:
        print("shardscope: error: out of memory", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
