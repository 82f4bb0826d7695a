"""``shardscope bench``: one run, its summary row appended, its timeline written."""

from __future__ import annotations

from shardscope.engine.base.errors import RunStopped
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.output.csv_out import (
    TIMELINE_COLUMNS,
    append_rows,
    run_columns,
    run_row,
    timeline_rows,
    write_rows,
)
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.runs.stop_signal import StopSignal
from shardscope.engine.stream.streaming_run import RunSummary

MIN_TOKENS = 2  # the first token comes out of the prompt pass; speed is timed over the tokens after it


def check_timed_tokens(settings) -> None:
    """Refuse, before the load and before any file is touched, a run with no decoded token to
    time: its row would carry avg_ts 0, its trace no decode picks, and -o would fail at the end.
    ``settings``: RunSettings, or parsed flags (sweep and tune check before reading their grids)."""
    from shardscope.engine.base.errors import ShardscopeError
    from shardscope.engine.knobs.knobs import KNOBS

    if settings.n_gen < MIN_TOKENS:
        raise ShardscopeError(f"{KNOBS['n_gen'].flag} {settings.n_gen}: the first token comes from the prompt pass, "
                              f"so nothing is left to time; give {KNOBS['n_gen'].flag} {MIN_TOKENS} or more")


def attach_projection(summary: RunSummary, device_id: str | None) -> None:
    """Fill the device columns: what this run's measured bytes would do on a device."""
    if not device_id:
        return
    from shardscope.engine.devices.run_projection import project_summary

    project_summary(summary, device_id)


def run_bench(settings: RunSettings, *, csv_path: str | None = None, timeline_path: str | None = None,
              device: str | None = None, on_sample=None, trace_path: str | None = None,
              on_verify=None) -> tuple[RunSummary, str]:
    summary = run_repetitions(settings, 1, csv_path=csv_path, timeline_path=timeline_path, device=device,
                              on_sample=on_sample, trace_path=trace_path, on_verify=on_verify)[-1]
    return summary, summary.text


def run_repetitions(settings: RunSettings, repetitions: int = 1, *, csv_path: str | None = None,
                    timeline_path: str | None = None, device: str | None = None,
                    on_sample=None, trace_path: str | None = None, on_verify=None,
                    stop: StopSignal | None = None) -> list[RunSummary]:
    """``repetitions`` rounds of one loaded run (llama-bench's ``-r``): one summary each.

    Like llama-bench's repetitions the model stays loaded between them; each round
    restarts the context from the prompt, the weights stay as streaming left them.
    Expert runs keep their expert cache between rounds the same way.
    ``on_verify`` (engine/runs/verify.py) gets the VerifyReport of a verified first round.
    ``stop`` (Ctrl-C) stops the open run; then nothing is written (RunStopped): a cut-short
    round is no row to compare, and the CSV keeps exactly the rows it had.
    """
    from shardscope.engine.runs.output_checks import check_outputs

    check_timed_tokens(settings)
    check_outputs(settings, csv_path=csv_path, timeline_path=timeline_path, trace_path=trace_path, device=device)
    summaries: list[RunSummary] = []
    samples: list = []
    if on_verify is not None:  # one run, every figure paired with an independent source
        from shardscope.engine.runs.verify import verified_run

        report, samples = verified_run(settings, on_sample=on_sample)
        summaries.append(report.summary)
        on_verify(report)
    while len(summaries) < repetitions:
        with open_run(settings, trace_path=trace_path, on_sample=on_sample) as run:
            if stop is not None:
                stop.watch(run)
            def keep(summary: RunSummary) -> None:
                summaries.append(summary)
                if len(summaries) >= repetitions:
                    run.stop()

            run.run(continuous=repetitions > 1, on_summary=keep)
            samples.extend(run.samples)
    if stop is not None and stop.is_set():
        raise RunStopped("interrupted: no row written")
    for summary in summaries:
        attach_projection(summary, device)
    if csv_path:
        append_rows(csv_path, run_columns(), [run_row(s) for s in summaries])
    if timeline_path:
        write_rows(timeline_path, TIMELINE_COLUMNS, timeline_rows(samples))
    return summaries
