"""A round's peaks are taken from its samples as they arrive (engine/measure/round_peaks.py):
only generating samples of this round count, and a round faster than the sampler still has one."""

from __future__ import annotations

import math
from types import SimpleNamespace

from shardscope.engine.measure.round_peaks import RoundPeaks


def sample(t, phase="generating", weights=100.0, gpu=0.0):
    return SimpleNamespace(t_s=t, phase=phase, resident_weights_mb=weights, gpu_mb=gpu)


def test_only_this_rounds_generating_samples_count():
    peaks = RoundPeaks()
    peaks.take(sample(0.5, weights=999.0))  # no round open yet
    assert peaks.count == 0
    peaks.begin(10.0)
    for s in (sample(9.9, weights=500.0),  # the round before's last sample, arriving late
              sample(10.1, phase="prompt", weights=400.0),  # the prompt pass is not the decode's peak
              sample(10.2, weights=120.0, gpu=30.0), sample(10.3, weights=140.0, gpu=10.0),
              sample(10.4, weights=90.0, gpu=35.0)):
        peaks.take(s)
    assert (peaks.count, peaks.resident_weights_mb, peaks.gpu_mb) == (3, 140.0, 35.0)
    peaks.begin(11.0)  # the next round starts from nothing
    assert peaks.count == 0 and peaks.resident_weights_mb == -math.inf


def test_a_round_faster_than_the_sampler_takes_one_reading_whatever_its_phase():
    peaks = RoundPeaks.reading(sample(3.0, phase="done", weights=77.0, gpu=5.0))
    assert (peaks.count, peaks.resident_weights_mb, peaks.gpu_mb) == (1, 77.0, 5.0)
