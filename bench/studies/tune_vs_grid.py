"""Auto-tune against the full grid over the same candidates: does the descent find the grid's best?

The research run behind docs/projection-validation.md's "Auto-tune vs full grid".
"""

from __future__ import annotations

import sys

from shardscope.engine.knobs.knobs import TUNED, describe  # noqa: E402
from shardscope.engine.knobs.settings import RunSettings  # noqa: E402
from shardscope.engine.search.tune import (  # noqa: E402
    TUNE_KNOBS,
    _fits,
    auto_tune,
    default_candidates,
    device_weight_budget_mb,
    knobs_text,
    score_text,
    start_settings,
)


def grid_settings(device_id: str, *, model_path: str | None, candidates: dict[str, list],
                  budget_cap_mb: float | None, n_gen: int, n_ctx: int = 128,
                  ssd_mb_s: float | None = None) -> tuple[RunSettings, dict[str, list]]:
    """The base settings and grid a full sweep over the same candidates runs (same budget, start profile)."""
    from shardscope.engine.devices.devices import get_device

    device = get_device(device_id)
    budget = device_weight_budget_mb(device)
    if budget_cap_mb is not None:
        budget = min(budget, budget_cap_mb)
    start = start_settings(device_id)
    base = start.with_changes(model_path=model_path, budget_mb=int(budget) if float(budget).is_integer() else budget,
                              n_gen=n_gen, n_ctx=n_ctx,
                              ssd_mb_s=float(start.ssd_mb_s if ssd_mb_s is None else ssd_mb_s))
    return base, {k: list(candidates[k]) for k in TUNE_KNOBS}


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.studies.tune_vs_grid MODEL --budget-cap-mb N``: auto-tune, then the full grid, compared.

    Prints what docs/projection-validation.md's "Auto-tune vs full grid" section shows:
    the tune's answer and runs, the grid's best point and runs, their ratio, and the
    descent replayed on the grid's own measurements (same numbers, no new noise).
    """
    import argparse
    import time

    from shardscope.engine.output.csv_out import append_rows, run_columns, run_row
    from shardscope.engine.search.sweep import iter_sweep

    p = argparse.ArgumentParser(prog="python -m bench.studies.tune_vs_grid", description=main.__doc__)
    p.add_argument("model")
    p.add_argument("--device", default="iphone-16-pro")
    p.add_argument("--budget-cap-mb", type=float, default=300)
    p.add_argument("--tokens", type=int, default=6)
    p.add_argument("--csv", default=None, help="write every run (tune and grid) here, with a 'search' prefix")
    args = p.parse_args(argv)
    cands = default_candidates()
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731

    t0 = time.perf_counter()
    tune = auto_tune(args.device, model_path=args.model, candidates=cands, budget_cap_mb=args.budget_cap_mb,
                     n_gen=args.tokens, on_eval=lambda e: say(f"tune  {knobs_text(e.settings)}: {score_text(e)}"))
    tune_s = time.perf_counter() - t0
    if args.csv:
        append_rows(args.csv + ".tune.csv", run_columns(),
                    [run_row(e.summary) for e in tune.evaluations if e.summary is not None])

    base, grid = grid_settings(args.device, model_path=args.model, candidates=cands,
                               budget_cap_mb=args.budget_cap_mb, n_gen=args.tokens)
    t0 = time.perf_counter()
    grid_results = {}
    for r in iter_sweep(base, grid, device=args.device):
        grid_results[r.settings] = r
        if r.summary is not None and args.csv:
            append_rows(args.csv + ".grid.csv", run_columns(), [run_row(r.summary)])
        say(f"grid {r.index + 1}/{r.total} {knobs_text(r.settings)}: "
            + (f"projected {r.summary.projected_ts:.3g} tok/s" if r.ok else f"{'skipped' if r.skipped else 'failed'}"))
    grid_s = time.perf_counter() - t0
    weight_budget = tune.weight_budget_mb
    grid_ok = [r for r in grid_results.values() if r.ok and _fits(r.settings, r.summary, weight_budget)]
    grid_best = max(grid_ok, key=lambda r: r.summary.projected_ts)
    grid_runs = sum(1 for r in grid_results.values() if not r.skipped)

    def replay(s: RunSettings):
        r = grid_results.get(s)
        return r.summary if r is not None and r.ok else None

    replayed = auto_tune(args.device, model_path=args.model, candidates=cands, budget_cap_mb=args.budget_cap_mb,
                         n_gen=args.tokens, measure=replay)
    # The tune's pick, measured again by the grid (same settings, another run): how much
    # of the gap is the pick and how much the noise of one measurement.
    tb = tune.best
    tb_in_grid = grid_results.get(tb.settings) if tb else None

    def row(label, settings, projected, measured, runs, seconds):
        return (f"| {label} | {describe(settings, TUNED)} | {projected:.3g} | {measured:.3g} | {runs} | "
                + (f"{seconds / 60:.1f} min |" if seconds else "– |"))

    print(f"model {args.model}, device {args.device}, budget {tune.budget_mb:g} MB (cap), {args.tokens} tokens "
          f"per run, emulated SSD {base.ssd_mb_s:g} MB/s while measuring\n")
    print("| search | best settings | projected tok/s | measured tok/s here | runs | wall time |")
    print("|---|---|---:|---:|---:|---:|")
    print(row("auto-tune (coordinate descent)", tb.settings, tb.summary.projected_ts, tb.summary.avg_ts,
              tune.runs, tune_s))
    print(row(f"full grid ({tune.grid_size} combinations, {grid_runs} runnable)", grid_best.settings,
              grid_best.summary.projected_ts, grid_best.summary.avg_ts, grid_runs, grid_s))
    rb = replayed.best
    print(row("descent replayed on the grid's measurements", rb.settings, rb.summary.projected_ts,
              rb.summary.avg_ts, replayed.runs, 0))
    print()
    ratio = tb.summary.projected_ts / grid_best.summary.projected_ts
    print(f"ratio auto-tune / grid best (projected tok/s): {ratio:.2f}"
          f" with {tune.runs / grid_runs:.0%} of the runs ({tune.runs} vs {grid_runs})")
    print(f"ratio replayed descent / grid best: {rb.summary.projected_ts / grid_best.summary.projected_ts:.2f} "
          f"with {replayed.runs} runs")
    if tb_in_grid is not None and tb_in_grid.ok:
        print(f"the tune's pick as measured by the grid run: projected {tb_in_grid.summary.projected_ts:.3g} tok/s "
              f"(ratio to grid best {tb_in_grid.summary.projected_ts / grid_best.summary.projected_ts:.2f})")
    ranked = sorted(grid_ok, key=lambda r: -r.summary.projected_ts)
    print("\ngrid top 5: " + "; ".join(f"{knobs_text(r.settings)} → {r.summary.projected_ts:.3g}"
                                        for r in ranked[:5]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
