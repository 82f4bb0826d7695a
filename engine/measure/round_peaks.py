"""A round's peaks from its samples as they arrive, so a round's figures need no kept samples.

The row's resident-weights and GPU-memory peaks are over the round's generating samples.
They were found by walking the run's whole sample history at every round end, which made
the run keep 6,000 samples (~870 B each) for as long as it ran: in the window, which keeps
each sample as numbers itself, that was 5 MiB of growth over a ten-minute session and a
walk over 6,000 objects per round. A round now opens its peaks at its start; the sampler's
thread feeds each sample in; the decode thread reads the maxima at the round's end.
"""

from __future__ import annotations

import math

__all__ = ["RoundPeaks"]


class RoundPeaks:
    """Maxima of the generating samples taken at or after ``since`` (the sampler's seconds)."""

    def __init__(self) -> None:
        self.since = math.inf  # no round open: nothing counts
        self.count = 0
        self.resident_weights_mb = -math.inf
        self.gpu_mb = -math.inf

    def begin(self, since: float) -> None:
        self.count = 0
        self.resident_weights_mb = self.gpu_mb = -math.inf
        self.since = since

    @classmethod
    def reading(cls, sample) -> "RoundPeaks":
        """The peaks of one reading, whatever its phase (a round faster than the sampler)."""
        peaks = cls()
        peaks.begin(-math.inf)
        peaks.resident_weights_mb, peaks.gpu_mb, peaks.count = sample.resident_weights_mb, sample.gpu_mb, 1
        return peaks

    def take(self, sample) -> None:
        """One sample (the sampler's thread); a late sample of the round before is left out."""
        if sample.phase != "generating" or sample.t_s < self.since:
            return
        self.resident_weights_mb = max(self.resident_weights_mb, sample.resident_weights_mb)
        self.gpu_mb = max(self.gpu_mb, sample.gpu_mb)
        self.count += 1
