"""``shardscope bench``: one run, its summary row appended, its timeline written."""

from __future__ import annotations

from engine.csv_out import TIMELINE_COLUMNS, append_rows, timeline_rows, write_rows
from engine.settings import RunSettings
from engine.streaming_run import RunSummary, StreamingRun


def attach_projection(summary: RunSummary, device_id: str | None) -> None:
    """Fill the device columns: what this run's measured bytes would do on a device."""
    if not device_id:
        return
    from engine.run_projection import project_summary

    project_summary(summary, device_id)


def run_bench(settings: RunSettings, *, csv_path: str | None = None, timeline_path: str | None = None,
              device: str | None = None, on_sample=None, on_verify=None) -> tuple[RunSummary, str]:
    """``on_verify``: run with every figure paired to an independent source (engine/verify.py)
    and hand it the VerifyReport."""
    if on_verify is not None:
        from engine.verify import verified_run

        report, samples = verified_run(settings, on_sample=on_sample)
        summary = report.summary
        on_verify(report)
    else:
        with StreamingRun(settings, on_sample=on_sample) as run:
            summary = run.run()
            samples = list(run.samples)
    attach_projection(summary, device)
    if csv_path:
        append_rows(csv_path, RunSummary.columns(), [summary.row()])
    if timeline_path:
        write_rows(timeline_path, TIMELINE_COLUMNS, timeline_rows(samples))
    return summary, summary.text
