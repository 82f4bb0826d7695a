"""Notice when the kernel keeps more weights resident than the budget allows.

The streamer's own books always respect the budget, but the kernel decides what
really leaves memory. Measured here: while another process maps the same GGUF
(a second shardscope, a bench, a viewer), the kernel keeps every page that process
maps (FADV_DONTNEED and MADV_PAGEOUT both skip them), so
the whole model stays resident, evicted shards reload from the page cache and the
disk reads nothing — the run looks fast and is measuring nothing. The charts show
it (weights curve above the budget line); this says it in words, once per episode.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.engine.measure.metrics import MetricsSample


@dataclass
class OverBudgetWatch:
    slack_mb: float = 64.0  # a shard in flight and page-edge rounding are normal
    hold_s: float = 3.0  # a moment over (budget just lowered, a load finishing) is normal too
    _since: float | None = None
    _reported: bool = False

    def reset(self) -> None:
        self._since, self._reported = None, False

    def check(self, sample: MetricsSample, slack_mb: float | None = None) -> str | None:
        """A message the first time the excess has lasted ``hold_s``; else None."""
        slack = self.slack_mb if slack_mb is None else slack_mb
        if sample.phase not in ("prompt", "generating") or sample.budget_mb != sample.budget_mb:
            # Loading and cold start hold the whole file by design; a round boundary
            # (the next prompt) is no reason to start the 3 s count again.
            return None
        over = (sample.resident_weights_mb > sample.budget_mb + slack
                and sample.accounted_weights_mb <= sample.budget_mb + slack)
        if not over:
            self._since = None
            self._reported = False
            return None
        if self._since is None:
            self._since = sample.t_s
        if self._reported or sample.t_s - self._since < self.hold_s:
            return None
        self._reported = True
        return (f"the kernel keeps {sample.resident_weights_mb:,.0f} MiB of weights resident, over the "
                f"{sample.budget_mb:,.0f} MiB budget, while the streamer has evicted down to "
                f"{sample.accounted_weights_mb:,.0f} MiB: is another process mapping this model file? "
                "Evictions skip shared pages, so these numbers do not show streaming.")
