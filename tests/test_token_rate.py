"""tok/s and hit rates at 0.01 tok/s and at 100 tok/s, as a 10 Hz sampler sees them."""

from __future__ import annotations

import math
import random

import pytest

from shardscope.engine.measure.token_rate import Tally, tokens_per_second, windowed_fraction

SAMPLE_S = 0.1


def _sampled_rates(token_s: float, n_tokens: int, jitter: float = 0.0, seed: int = 0):
    """What the sampler would chart: (t, tok/s) every 0.1 s over a run of equal tokens."""
    rng = random.Random(seed)
    ends, t = [], 0.0
    for _ in range(n_tokens):
        t += token_s * (1 + rng.uniform(-jitter, jitter))
        ends.append(t)
    durations = [b - a for a, b in zip([0.0, *ends], ends)]
    out = []
    now = SAMPLE_S
    while now < ends[-1]:
        done = sum(1 for e in ends if e <= now)
        in_flight = now - (ends[done - 1] if done else 0.0)
        out.append((now, tokens_per_second(durations[:done], in_flight_s=in_flight)))
        now += SAMPLE_S
    return out


@pytest.mark.parametrize("token_s", [100.0, 0.01])  # 0.01 tok/s and 100 tok/s
def test_rate_is_steady_at_both_ends_and_never_zero(token_s):
    rates = _sampled_rates(token_s, n_tokens=6 if token_s > 1 else 600, jitter=0.05)
    after_first = [r for t, r in rates if t > token_s * 1.05]
    assert after_first and all(r > 0 for r in after_first), "never 0 while a token is in flight"
    expected = 1 / token_s
    # held between tokens: within the jitter of the true rate at every sample
    assert all(r == pytest.approx(expected, rel=0.12) for r in after_first)


def test_rate_is_nan_before_the_first_token_not_zero():
    assert math.isnan(tokens_per_second([], in_flight_s=3.0))


def test_a_late_token_bends_the_rate_down_smoothly():
    durations = [1.0] * 8
    assert tokens_per_second(durations, in_flight_s=0.5) == pytest.approx(1.0)  # on time: held
    late = [tokens_per_second(durations, in_flight_s=s) for s in (2.0, 4.0, 8.0, 16.0)]
    assert late == sorted(late, reverse=True) and all(r > 0 for r in late)
    assert late[0] == pytest.approx(4 / 5.0)  # as if the late token finished now


def test_fast_tokens_count_the_last_second_not_just_four():
    durations = [0.01] * 200 + [0.02] * 50  # rate halved for the last second
    assert tokens_per_second(durations, window_s=1.0) == pytest.approx(50.0, rel=0.05)
    assert tokens_per_second([0.01] * 3) == pytest.approx(100.0)


def _pinned_half_tallies(token_s: float, layers: int = 10, n_tokens: int = 5):
    """Counters of a run whose first half of layers hit and second half miss, sampled at 10 Hz."""
    tallies = []
    now = 0.0
    while now <= token_s * n_tokens:
        done, into = divmod(now / token_s, 1.0)
        calls = int(done) * layers + int(into * layers)
        hits = int(done) * layers // 2 + min(int(into * layers), layers // 2)
        tallies.append(Tally(now, int(done), hits, calls))
        now += SAMPLE_S
    return tallies


@pytest.mark.parametrize("token_s", [100.0, 0.01])
def test_hit_fraction_per_token_window_is_steady_at_both_ends(token_s):
    tallies = _pinned_half_tallies(token_s, n_tokens=4 if token_s > 1 else 400)
    marks: list[Tally] = []
    values = []
    for i, latest in enumerate(tallies):
        if not marks or marks[-1].n_tokens != latest.n_tokens:
            marks.append(latest)
        start = tallies[max(0, i - 10)]  # the sampler's one-second window
        if latest.n_tokens >= 2:
            values.append(windowed_fraction(start, latest, marks[-2:]))
    assert values
    # a 1 s window inside one 100 s token would read 1.0 then 0.0; per token it is 0.5
    assert all(v == pytest.approx(0.5, abs=0.1) for v in values)


def test_hit_fraction_nan_when_nothing_happened():
    a = Tally(0.0, 0, 0, 0)
    assert math.isnan(windowed_fraction(a, Tally(1.0, 0, 0, 0), []))
