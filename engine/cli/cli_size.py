"""``shardscope size`` (``plan``: its old name, an alias): what-if sizing of a model on a device, from a
GGUF header, a routing trace's header (each layer's expert and dense bytes) or parameter counts
(engine/devices/sizing*.py).

    shardscope size --device iphone-16-pro (--model PATH | --trace FILE [--experts-used K] | --total-params 1.56e12
        --active-params 48e9 --bits 8 --layers 61 [--globals-bytes 2.35e9]) [--budget-mb N]
        [--policy pinned|lru] [--ssd-mb-s N] [--extended-limit] [--no-prefetch]
"""

from __future__ import annotations

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.finite import finite_float_arg
from shardscope.engine.knobs.knobs import KNOBS


def register(sub) -> None:
    _register_sizing(sub)


def _register_sizing(sub) -> None:
    # plan is size's old name: argparse lists an alias as "size (plan)", so the help says what it is
    p = sub.add_parser(
        "size", aliases=["plan"],
        help="what-if: how a model (too big to run here) would stream on a device (plan: the old name, an alias)",
        description="From a GGUF header (--model), from a routing trace's header (--trace alone: BigMoeOnEdge's "
                    "route_trace v1 gives each layer's expert and dense bytes), or from numbers (--total-params, "
                    "--active-params, --bits, --layers) as the fallback. Prints where the bytes came from, the "
                    "budget, what stays resident, bytes streamed per token and the roofline projection. "
                    "'shardscope plan' is the old name of this command, kept as an alias.")
    p.add_argument("--device", default="iphone-16-pro", help="device preset id (default: iphone-16-pro)")
    # --model, as every other command names its model; --gguf is the old name, kept as an alias
    p.add_argument("--model", "--gguf", dest="gguf", metavar="GGUF",
                   help="read sizes from this GGUF's header (never the weights); --gguf: the old name, an alias")
    p.add_argument("--like", choices=("kimi-k3",), default=None,
                   help="a published model's full shape from its config, no file: kimi-k3 (2.8 T, 896 experts top-16)")
    p.add_argument("--total-params", type=finite_float_arg, help="all parameters, e.g. 1.56e12")
    p.add_argument("--active-params", type=finite_float_arg, help="parameters one token uses (MoE; default: all)")
    p.add_argument("--bits", type=finite_float_arg, help="bits per weight, e.g. 8 or 4.5")
    p.add_argument("--layers", type=int, help="number of layers")
    p.add_argument("--globals-fraction", type=finite_float_arg, default=None,
                   help="embeddings + output head as a share of the bytes a token touches (default: estimated)")
    p.add_argument("--globals-bytes", type=finite_float_arg, default=None,
                   help="embeddings + output head in bytes, e.g. 2.35e9 (instead of --globals-fraction)")
    p.add_argument("--name", default="", help="label for the model")
    p.add_argument("--budget-mb", type=finite_float_arg, default=None,
                   help="the memory budget: what the weights may occupy (MiB); "
                        "default: app limit - KV - compute - runtime")
    p.add_argument("--policy", default="pinned", help="pinned or lru")
    p.add_argument("--no-prefetch", action="store_true", help="reads do not overlap compute")
    p.add_argument("--ssd-mb-s", type=finite_float_arg, default=None, help="what-if SSD read rate (MB/s)")
    p.add_argument("--compute-s-per-token", type=finite_float_arg, default=0.0,
                   help="compute time per token on the device, if measured (default: not modelled)")
    p.add_argument("--extended-limit", action="store_true",
                   help="use the device's larger memory limit (entitlement), when it has one")
    p.add_argument("--expert-hit-rate", type=finite_float_arg, default=None,
                   help="MoE: expert cache hit rate 0..1 measured by a bench run (expert_hit_rate column)")
    p.add_argument("--trace", help="MoE: replay this routing trace for the expert hit rate, with a cache of the same "
                                   "share of the experts as the device's; alone (no --model, no numbers) its header "
                                   "is the model: each layer's expert and dense bytes (route_trace v1)")
    p.add_argument("--experts-used", type=int, default=None, metavar="K",
                   help="with --trace as the model: run K experts a token instead of the trace's k "
                        "(re-scales a token's picked bytes)")
    p.add_argument("--expert-policy", default=KNOBS["expert_policy"].default, choices=KNOBS["expert_policy"].choices,
                   help="MoE: the expert cache policy the --trace replay uses (default "
                        f"{KNOBS['expert_policy'].default})")
    # The knobs the run's minimum and split depend on, as bench takes them (engine/knobs/knobs.py)
    for key in ("shard_mb", "prefetch_depth", "trunk_share"):
        spec = KNOBS[key]
        p.add_argument(spec.flag, type=int, default=spec.default, dest=key,
                       help=f"{spec.label} as bench takes it (default {spec.text(spec.default)}): the minimum --model "
                            "prints is the one bench accepts with the same value".replace("%", "%%"))
    p.set_defaults(func=cmd_size)


def cmd_size(args) -> int:
    """``shardscope size`` (``plan``, its old name, still works): the what-if sizing of a model on a device."""
    from shardscope.engine.devices.devices import get_device
    from shardscope.engine.devices.sizing import POLICIES, SizingInput
    from shardscope.engine.devices.sizing_gguf import size_from_gguf_header
    from shardscope.engine.devices.sizing_numbers import size_from_numbers
    from shardscope.engine.devices.sizing_text import format_sizing

    numbers = {"--total-params": args.total_params, "--active-params": args.active_params, "--bits": args.bits,
               "--layers": args.layers, "--globals-fraction": args.globals_fraction,
               "--globals-bytes": args.globals_bytes}
    given = [flag for flag, value in numbers.items() if value is not None]
    if args.gguf and given:
        raise ShardscopeError(f"size: give --model or the model's numbers, not both ({given[0]} with --model)")
    if args.like and (args.gguf or given or args.trace):
        raise ShardscopeError(f"size: --like {args.like} is the model; drop --model, --trace and the model's numbers")
    if args.policy not in POLICIES:
        raise ShardscopeError(f"--policy: must be one of {', '.join(POLICIES)}, got {args.policy!r}")
    device = get_device(args.device)
    if args.extended_limit:
        device = device.with_extended_limit()
    if args.expert_hit_rate is not None and args.trace:
        raise ShardscopeError("size: give --expert-hit-rate or --trace, not both")
    if args.expert_hit_rate is not None and not 0 <= args.expert_hit_rate <= 1:
        raise ShardscopeError(f"--expert-hit-rate: must be between 0 and 1, got {args.expert_hit_rate:g}")
    trace = None
    if args.trace:
        from shardscope.engine.experts.foreign_traces import load_trace

        trace = load_trace(args.trace)
    # the model's bytes: a GGUF header, else a trace header with each layer's bytes, else parameter counts
    trace_is_model = trace is not None and not args.gguf and trace.header.has_layer_bytes
    model_numbers = [flag for flag in given if flag != "--globals-bytes"]
    if trace_is_model and model_numbers:
        raise ShardscopeError(
            f"size: {args.trace}'s header gives the model's bytes per layer; {model_numbers[0]} would describe "
            "another model (drop the numbers, or give --model for the model and the trace for its routing)")
    if args.experts_used is not None and not trace_is_model:
        raise ShardscopeError("--experts-used: re-scales the k of a trace whose header is the model "
                              "(--trace FILE with each layer's expert and dense bytes, no --model)")
    common = dict(budget_mb=args.budget_mb, policy=args.policy, prefetch=not args.no_prefetch,
                  compute_s_per_token=args.compute_s_per_token, ssd_mb_s=args.ssd_mb_s,
                  expert_hit_rate=args.expert_hit_rate, expert_trace=trace, expert_policy=args.expert_policy)
    from shardscope.engine.knobs.settings import RunSettings, validate

    knobs = validate(RunSettings(model_path=args.gguf, shard_mb=args.shard_mb, prefetch_depth=args.prefetch_depth,
                                 trunk_share=args.trunk_share), source="size")
    if args.like:
        from shardscope.engine.devices.sizing import size_shape
        from shardscope.engine.devices.sizing_like import shape_like

        common.pop("expert_trace")
        result = size_shape(shape_like(args.like, args.shard_mb, args.prefetch_depth), device,
                            trunk_share=args.trunk_share,
                            expert_trace=None, **common)
    elif args.gguf:
        result = size_from_gguf_header(args.gguf, device, trunk_share=args.trunk_share, settings=knobs, **common)
    elif trace_is_model:
        from shardscope.engine.devices.sizing_trace import size_from_trace

        common.pop("expert_trace")
        result = size_from_trace(trace, args.trace, device, experts_used=args.experts_used,
                                 globals_bytes=args.globals_bytes, **common)
    else:
        missing = [flag for flag in ("--total-params", "--bits", "--layers") if numbers[flag] is None]
        if missing:
            where = (f"{args.trace}'s header has no dense bytes per layer, so " if trace is not None else "")
            raise ShardscopeError(
                f"size: {where}missing {', '.join(missing)} (give --model PATH, --trace FILE whose header has each "
                "layer's expert and dense bytes, or --total-params, --bits and --layers)")
        result = size_from_numbers(
            SizingInput(total_params=args.total_params, active_params=args.active_params,
                      bits_per_weight=args.bits, n_layers=args.layers, globals_fraction=args.globals_fraction,
                      globals_bytes=args.globals_bytes, name=args.name),
            device, **common)
    print(format_sizing(result))
    if result.fits_in_memory and (args.trace or args.expert_hit_rate is not None):
        given = f"--trace {args.trace}" if args.trace else f"--expert-hit-rate {args.expert_hit_rate:g}"
        print(f"  note        {given} not used: the whole model fits on {device.name}, so no expert is "
              "streamed and no hit rate enters the projection")
    return 0
