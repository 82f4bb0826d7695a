"""Subcommands that search or extrapolate: sweep, tune, size (its own module: cli_size).

    shardscope sweep [--model PATH] --shard-mb 16,64,256 --prefetch-depth 0-4 --threads 1,2 \\
        --n-gpu-layers 0 --budget-mb 200,300 --policy pinned,lru --ssd-mb-s 0 --tokens N \\
        --csv out.csv [--device iphone-16-pro]
    shardscope tune --device iphone-16-pro [--model PATH] [--budget-cap-mb N] [--csv out.csv] \\
        [--save-profile NAME] [--shard-mb 8,16,32,64,128] [--prefetch-depth 0-4] [--threads 1-2] \\
        [--policy pinned,lru]
    shardscope size --device iphone-16-pro (--model PATH | --total-params 1.56e12 \\
        --active-params 48e9 --bits 8 --layers 61 [--globals-bytes 2.35e9]) [--budget-mb N] \\
        [--policy pinned|lru] [--ssd-mb-s N] [--extended-limit] [--no-prefetch]

Knob flags of sweep and tune take lists: "16,64,256" or llama-bench ranges "0-4",
"1-8+2", "1-16*2" (engine/knobs/knob_ranges.py). Every refusal is one line, exit 2.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
import types

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.cli import cli_args
from shardscope.engine.knobs.knobs import KNOBS, SWEPT, TUNED, RunSettings, describe

# flag → RunSettings field, in the order the sweep varies them (last fastest)
SWEEP_FLAGS = {KNOBS[key].flag: key for key in SWEPT}
TUNE_FLAGS = {KNOBS[key].flag: key for key in TUNED}


def register(sub) -> None:
    """Add the search subcommands to the ``shardscope`` parser."""
    _register_sweep(sub)
    _register_tune(sub)
    from shardscope.engine.cli import cli_size  # size (plan, its old name): its own module

    cli_size.register(sub)


# ------------------------------------------------------------------ shared bits
_COMMON = ("model_path", "n_gen", "n_ctx", "prompt", "temperature", "seed")  # the run flags searches keep


def _add_common_run_flags(p: argparse.ArgumentParser, default_tokens: int) -> None:
    cli_args.add_run_arguments(p, skip=tuple(k for k in KNOBS if k not in _COMMON), n_gen={
        "default": default_tokens, "help": "tokens per run (the first is warm-up, excluded from tok/s; at least 2)"})
    p.add_argument("--csv", help="append one row per run to this CSV (bench columns)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _parse_knobs(args, flags: dict[str, str]) -> dict[str, list]:
    from shardscope.engine.knobs.knob_ranges import parse_knob

    grid = {}
    for flag, key in flags.items():
        text = getattr(args, key)
        if text is not None:
            grid[key] = parse_knob(flag, str(text), key)
    return grid


def _check_tokens(args) -> None:
    """Bench's one rule (bench_command.check_timed_tokens), before any grid is read."""
    from shardscope.engine.runs.bench_command import check_timed_tokens

    check_timed_tokens(args)


def _base_settings(args, first_values: dict[str, object]):
    """RunSettings from the common flags, the knobs at their first values (same n_ctx rule as bench)."""
    ns = types.SimpleNamespace(**{key: getattr(args, key) for key in _COMMON}, **first_values)
    return cli_args.settings_from_args(ns)


class _Interrupt:
    """First Ctrl+C: stop the current run at its next token and end cleanly (exit 130).

    llama.cpp runs Python callbacks inside its decode, and an exception raised
    there is swallowed by ctypes, so a plain KeyboardInterrupt could be lost; a flag
    the sweep polls is reliable. A second Ctrl+C raises KeyboardInterrupt as usual.
    """

    def __init__(self, say):
        self.flag = threading.Event()
        self._say = say
        self._old = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self.flag.set()
        self._say("interrupted: stopping after the current token (Ctrl+C again to abort at once)")
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
        return False

    def __call__(self) -> bool:
        return self.flag.is_set()


def _progress(total: int, quiet: bool, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit="run", desc=desc, disable=quiet, dynamic_ncols=True)


def _note(bar, text: str) -> None:
    from tqdm import tqdm

    tqdm.write(text, file=sys.stderr) if not bar.disable else print(text, file=sys.stderr)


# ----------------------------------------------------------------------- sweep
def _register_sweep(sub) -> None:
    d = RunSettings()
    p = sub.add_parser(
        "sweep", help="run every combination of knob values (one cold run and one CSV row each)",
        description="Each knob takes a list: 16,64,256 or llama-bench ranges 0-4, 1-8+2, 1-16*2. "
                    "Every combination runs cold (fresh run, non-pinned shards paged out); the first "
                    "token is warm-up. Combinations below the minimum budget are skipped with a note. "
                    "Ctrl+C stops after the current token and keeps the rows written (exit 130).")
    for flag, key in SWEEP_FLAGS.items():
        spec = KNOBS[key]
        p.add_argument(flag, dest=key, default="0" if spec.off else str(getattr(d, key)),
                       metavar=cli_args.metavar(key), help=cli_args.list_help(key))
    _add_common_run_flags(p, default_tokens=8)
    p.add_argument("--device", help="also project each run onto this device (e.g. iphone-16-pro)")
    p.add_argument("--min-rounds", type=cli_args.non_negative_int, default=3,
                   help="warm rounds per combination at least, after its cold first round (default 3)")
    p.add_argument("--max-rounds", type=cli_args.non_negative_int, default=8,
                   help="warm rounds at most (fewer where the interval is known sooner; 0: the cold round alone)")
    cli_args.add_output_arguments(p)  # -o, -r: each repetition is one more cold pass over the grid
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args) -> int:
    from shardscope.engine.knobs.knob_ranges import format_values
    from shardscope.engine.search.sweep import describe_settings, expand_grid, run_sweep

    _check_tokens(args)
    grid = _parse_knobs(args, SWEEP_FLAGS)
    base = _base_settings(args, {k: v[0] for k, v in grid.items()})
    total = len(expand_grid(base, grid))
    varied = [k for k, v in grid.items() if len(v) > 1]
    shown = varied or list(grid)
    passes = args.repetitions
    human = sys.stdout if args.output == "md" else sys.stderr  # with csv/json/jsonl stdout carries only the rows
    print(f"sweep: {total} combinations ("
          + " x ".join(f"{KNOBS[k].flag} {format_values(grid[k])}" for k in varied or ["shard_mb"])
          + f"), {plural(args.n_gen, 'token')} each" + (f", {passes} passes" if passes > 1 else "")
          + (f", rows to {args.csv}" if args.csv else ""), file=sys.stderr)
    from shardscope.engine.search.search_noise import fits_note, ranking_line

    note = fits_note(base.model_path, grid.get("budget_mb", [base.budget_mb]), "shard size, prefetch depth and policy")
    if note:  # said first: what follows would otherwise read as a ranking of the knobs
        print(note, file=sys.stderr)
    results = []
    bar = _progress(total * passes, args.quiet, "sweep")

    def on_result(result, totals) -> None:
        results.append((result, _llama_bench_time()))
        label = describe_settings(result.settings, shown)
        if result.skipped:
            _note(bar, f"skipped {label}: {result.error}")
        elif result.stopped:
            _note(bar, f"stopped {label} (not written)")
        elif result.error:
            _note(bar, f"failed {label}: {result.error}")
        else:
            s = result.summary
            proj = f", {s.device} {s.projected_ts:.3g} tok/s" if s.device else ""
            bar.set_postfix_str(f"last {s.avg_ts:.3g} tok/s{proj}", refresh=False)
            here = result.interval("avg_ts")
            device = result.interval("projected_ts") if s.device else None
            stalled = f"; {result.stalled} round(s) left out: the host stalled" if result.stalled else ""
            _note(bar, f"  {label}: {here.text()} tok/s here"
                       + (f", {s.device} {device.text()} tok/s" if device is not None else "") + stalled)
        bar.update(1)

    from shardscope.engine.search.sweep import SweepTotals

    latest = {"totals": SweepTotals(combinations=total)}

    def on_result_kept(result, totals) -> None:
        latest["totals"] = totals
        on_result(result, totals)

    totals = SweepTotals(combinations=total)
    try:
        with _Interrupt(lambda text: _note(bar, text)) as interrupted:
            for _ in range(passes):
                latest["totals"] = SweepTotals(combinations=total)
                done = run_sweep(base, grid, csv_path=args.csv, device=args.device,
                                 should_stop=interrupted, on_result=on_result_kept,
                                 min_rounds=args.min_rounds, max_rounds=args.max_rounds)
                totals = _add_totals(totals, done)
                if done.stopped:
                    break
    except KeyboardInterrupt:  # a second Ctrl+C: abort at once, still say what was kept
        totals = _add_totals(totals, latest["totals"])
        totals.stopped = True
    finally:
        bar.close()
    where = f" to {args.csv}" if args.csv else " (no --csv: nothing saved)"
    tail = f"{totals.rows_written} rows written{where}, {totals.skipped} skipped, {totals.failed} failed"
    if totals.stopped:
        print(f"shardscope: sweep interrupted after {totals.rows_written} of {total * passes} runs: {tail}",
              file=sys.stderr)
        return 130
    groups: dict = {}
    for r, _ in results:
        if r.ok:
            groups.setdefault(r.settings, []).extend(r.rounds or [r.summary])  # every pass's warm rounds
    label = lambda s: describe_settings(s, shown)  # noqa: E731
    d = RunSettings()  # among tied settings the defaults' combination stays
    default = next((k for k in groups if all(getattr(k, key) == getattr(d, key) for key in varied)), None)
    lines = [ranking_line(groups, label, "fastest here", default=default)]
    if args.device:
        lines.append(ranking_line(groups, label, f"fastest on {args.device} (projected)", "projected_ts",
                                  default=default))
    for line in filter(None, lines):
        print(line, file=human)
    print(f"sweep: {tail}", file=human)
    _print_llama_bench_rows(base, results, args.output)
    return 0 if totals.rows_written or not total else 1


def _llama_bench_time() -> str:
    from shardscope.engine.output.llama_bench_output import utc_now

    return utc_now()


def _add_totals(a, b):
    from shardscope.engine.search.sweep import SweepTotals

    return SweepTotals(combinations=a.combinations, rows_written=a.rows_written + b.rows_written,
                       skipped=a.skipped + b.skipped, failed=a.failed + b.failed, stopped=a.stopped or b.stopped)


def _print_llama_bench_rows(base, results, fmt: str) -> None:
    """One llama-bench row per combination that ran: its passes are the repetitions."""
    from shardscope.engine.output.llama_bench_output import print_rows

    groups: dict = {}
    for result, finished_at in results:
        if result.ok:
            summaries, started = groups.setdefault(result.settings, ([], finished_at))
            summaries.append(result.summary)
    if groups:
        print_rows(base, groups.values(), fmt)


# ------------------------------------------------------------------------ tune
def _searched_lists(cands: dict, args, device) -> dict:
    """The candidate lists auto_tune will search (a knob the run kind ignores keeps one value): the
    grid printed before the tune is the one its result reports (issue 48: "1000 combinations" then
    "a 100-combination grid")."""
    from shardscope.engine.runs.run_factory import streams_experts
    from shardscope.engine.search.tune import default_candidates, device_weight_budget_mb, searched_grid

    budget = device_weight_budget_mb(device)
    budget = min(budget, args.budget_cap_mb or budget)
    full = {**default_candidates(), **cands}
    try:
        experts = streams_experts(RunSettings(model_path=args.model_path, budget_mb=budget))
    except ShardscopeError:
        return full  # the tune itself refuses the model, in its own words
    return searched_grid(full, experts, cands)


def _register_tune(sub) -> None:
    p = sub.add_parser(
        "tune", help="find the settings with the best projected tok/s on a device (coordinate descent)",
        description="Coordinate descent over policy, shard size, prefetch depth and threads, budget fixed "
                    "at the device's memory budget (or --budget-cap-mb), starting from the device's "
                    "built-in profile; each candidate is a real cold run here projected onto the device; "
                    "results are cached so no combination runs twice.")
    p.add_argument("--device", default="iphone-16-pro", help="device preset id (default: iphone-16-pro)")
    p.add_argument("--budget-cap-mb", type=cli_args.positive_float, default=None,
                   help="cap the memory budget below the device's (so streaming matters for small models)")
    for flag, key in TUNE_FLAGS.items():
        spec = KNOBS[key]
        p.add_argument(flag, dest=key, default=spec.tune or None, metavar=cli_args.metavar(key),
                       help=cli_args.list_help(key, "candidates") + ("" if spec.tune else
                                                                     " (default: 1 to this host's cores)"))
    p.add_argument("--ssd-mb-s", type=cli_args.non_negative_float, default=None,
                   help="SSD emulated while measuring here (default: the device profile's; 0: off)")
    p.add_argument("--min-gain", type=cli_args.non_negative_float, default=0.0,
                   help="relative gain a move must bring besides a separated interval (default 0)")
    p.add_argument("--min-rounds", type=cli_args.positive_int, default=3,
                   help="warm rounds per candidate at least (after its cold first round; default 3)")
    p.add_argument("--max-rounds", type=cli_args.positive_int, default=8,
                   help="warm rounds per candidate at most (fewer where its interval is known sooner; default 8)")
    p.add_argument("--max-passes", type=cli_args.positive_int, default=6)
    p.add_argument("--save-profile", metavar="NAME", help="save the best settings as a user profile")
    p.add_argument("--force", action="store_true", help="let --save-profile replace a profile of that name")
    p.add_argument("--profile-dir", help="where to save it (default: $SHARDSCOPE_CONFIG_DIR/profiles or "
                                         "~/.config/shardscope/profiles)")
    _add_common_run_flags(p, default_tokens=6)
    p.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    import os

    from shardscope.engine.devices.devices import get_device
    from shardscope.engine.search.sweep import check_csv_columns
    from shardscope.engine.search.tune import SEARCH_DESCRIPTION, auto_tune, save_tuned_profile

    _check_tokens(args)
    if args.min_gain >= 1:
        raise ShardscopeError(f"--min-gain: must be below 1, got {args.min_gain:g}")
    device = get_device(args.device)
    if args.csv:  # outputs are refused now, not after the search
        check_csv_columns(args.csv)
    if args.save_profile:
        from shardscope.engine.search.tune_verdict import tuned_profile_path

        tuned_profile_path(args.save_profile, args.profile_dir, force=args.force)
    if args.min_rounds > args.max_rounds:
        raise ShardscopeError(f"--min-rounds {args.min_rounds} exceeds --max-rounds {args.max_rounds}")
    cands = _parse_knobs(args, TUNE_FLAGS)
    if "threads" not in cands:
        cands["threads"] = list(range(1, (os.cpu_count() or 1) + 1))
    base = _base_settings(args, {})
    cands = _searched_lists(cands, args, device)  # the lists the descent searches, so the counts agree
    grid = math.prod(len(v) for v in cands.values())
    rounds = f"{args.min_rounds}-{args.max_rounds}" if args.min_rounds < args.max_rounds else f"{args.min_rounds}"
    print(f"tune for {device.name}: {SEARCH_DESCRIPTION.format(rounds=rounds)}", file=sys.stderr)
    from shardscope.engine.knobs.knob_ranges import format_values

    print("  candidates: " + "; ".join(f"{k} {format_values(v)}" for k, v in cands.items())
          + f" ({grid} combinations in the full grid)", file=sys.stderr)
    from shardscope.engine.search.search_noise import fits_note
    from shardscope.engine.search.tune import device_weight_budget_mb

    budget = device_weight_budget_mb(device)
    note = fits_note(args.model_path, [min(budget, args.budget_cap_mb or budget)],
                     "shard size, prefetch depth and policy")
    if note:
        print(note, file=sys.stderr)
    bar = _progress(None, args.quiet, "tune")
    from shardscope.engine.output.csv_out import append_rows, run_columns, run_row


    def on_eval(ev) -> None:
        from shardscope.engine.search.tune import knobs_text, score_text

        if ev.summary is not None and args.csv:
            append_rows(args.csv, run_columns(), [run_row(ev.summary)])
        if ev.order:
            bar.update(1)
        _note(bar, f"  {'run ' + str(ev.order) if ev.order else 'refused'}: {knobs_text(ev.settings)} → "
                   f"{score_text(ev)}")

    try:
        with _Interrupt(lambda text: _note(bar, text)) as interrupted:
            result = auto_tune(device.id, model_path=args.model_path, candidates=cands,
                               budget_cap_mb=args.budget_cap_mb, n_gen=args.n_gen, n_ctx=base.n_ctx,
                               ssd_mb_s=args.ssd_mb_s, min_gain=args.min_gain, max_passes=args.max_passes,
                               min_rounds=args.min_rounds, max_rounds=args.max_rounds,
                               on_eval=on_eval, should_stop=interrupted)
    finally:
        bar.close()
    print(f"search: coordinate descent, {result.passes} pass(es), {result.runs} runs, {result.rounds} warm rounds "
          f"(+{result.refused} combinations refused before loading) of a {result.grid_size}-combination grid")
    print(f"budget: {result.budget_mb:g} MiB (device memory budget {result.weight_budget_mb:g} MiB"
          + (f", capped at {args.budget_cap_mb:g} MiB" if args.budget_cap_mb else "") + ")")
    print(f"  {result.path[0]}" if result.path else "  (nothing ran)")
    for decision in result.decisions:  # each knob's interval decision, moves included
        print(f"  {decision.text()}")
    if result.best is None:
        print("tune: no candidate ran and fit the device", file=sys.stderr)
        return 130 if result.stopped else 1
    from shardscope.engine.devices.run_projection import compute_basis
    from shardscope.engine.search.tune import verdict_text

    b = result.best
    s = b.settings
    print(f"best: {describe(s, (*TUNED, 'budget_mb'))}")
    print(f"      on {device.id}: {verdict_text(result)}")
    print(f"      emulated SSD while measuring: {'off' if not s.ssd_mb_s else f'{s.ssd_mb_s:g} MB/s'}; resident "
          f"weights {b.summary.resident_weights_mb:.0f} MiB ≤ {result.weight_budget_mb:g} MiB; device compute "
          f"{compute_basis(device)}")
    if result.stopped:
        print(f"shardscope: tune interrupted after {result.runs} runs: best so far shown"
              + (f", {result.runs} rows written to {args.csv}" if args.csv else ""), file=sys.stderr)
        return 130
    if args.save_profile:
        path = save_tuned_profile(result, args.save_profile, directory=args.profile_dir, model_path=args.model_path,
                                  force=args.force)
        print(f"saved profile {args.save_profile!r} to {path}")
    return 0
