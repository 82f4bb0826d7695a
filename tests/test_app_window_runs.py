"""WindowRuns without a window: which run is current, the session time axis, the rounds
it quotes, the search lock, and one real run driven through it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shardscope.app.runs.window_runs import WindowRuns
from shardscope.engine.knobs.settings import RunSettings


def sample(t: float):
    """A real sample (the session keeps its numbers for export); only the time matters here."""
    from shardscope.engine.measure.metrics import MetricsSample

    return MetricsSample(t_s=t, rss_mb=1.0, resident_weights_mb=1.0, other_rss_mb=0.0, ssd_mb_s=0.0,
                         read_mb_total=0.0, cache_hit_rate=1.0, on_time_rate=1.0, tok_s=1.0, n_tokens=1,
                         budget_mb=100.0, accounted_weights_mb=1.0, cache_hits=0, cache_misses=0, on_time=0,
                         stalls=0)


def summary(stopped: bool):
    return SimpleNamespace(stopped=stopped)


@pytest.fixture
def session(qtbot):
    s = WindowRuns()
    yield s
    s.close()


def test_late_samples_of_a_replaced_run_are_dropped_and_time_continues(session):
    seen = []
    session.sample.connect(lambda t, s: seen.append(t))
    marks = []
    session.run_started.connect(lambda plan, settings, new_press: marks.append(new_press))

    session._on_run_started(1, "plan", "settings")
    session._on_sample(1, sample(0.1))
    session._on_sample(1, sample(0.2))
    session._on_run_started(2, "plan", "settings")  # a restart: its sampler starts at 0 again
    session._on_sample(1, sample(0.3))  # late, from run 1
    session._on_sample(2, sample(0.0))
    session._on_sample(2, sample(0.1))

    assert seen == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert session.last_t == pytest.approx(0.4)
    assert [round(offset + s.t_s, 6) for offset, s in session.timeline] == [0.1, 0.2, 0.3, 0.4]
    assert marks == [False, False]  # a restart inside one press of Run is not a new press

    session._on_run_started(1, "plan", "settings")  # the next press of Run: the axis goes on
    session._on_sample(1, sample(0.0))
    assert marks[-1] is True and seen[-1] == pytest.approx(0.5)


def test_tokens_and_phases_of_other_runs_are_not_forwarded(session):
    tokens, phases = [], []
    session.token.connect(lambda n, piece: tokens.append(piece))
    session.phase.connect(phases.append)
    session._on_run_started(2, "plan", "settings")
    session._on_token(1, 0, "old", 0.1)
    session._on_token(2, 0, "new", 0.1)
    session._on_phase(2, "generating")  # nothing is running: no phase to report
    assert tokens == ["new"] and phases == []


def test_a_cut_short_round_is_kept_but_not_quoted(session):
    shown = []
    session.summary.connect(lambda s, is_last: shown.append(is_last))
    first_cut, full, cut = summary(True), summary(False), summary(True)
    session._on_summary(1, first_cut)  # nothing better yet: quote it
    session._on_summary(1, full)
    session._on_summary(1, cut)
    assert session.summaries == [first_cut, full, cut]
    assert session.last_round is full and shown == [True, True, False]
    assert session.complete_rounds() == 1


def test_search_lock_refuses_run_and_only_its_owner_releases_it(session):
    changes = []
    session.state_changed.connect(lambda: changes.append(session.search_owner()))
    session.begin_search("the sweep")
    refusal = session.start(RunSettings())
    assert refusal.startswith("the sweep is running") and not session.is_running()
    session.end_search("the auto-tune")
    assert session.search_owner() == "the sweep"
    session.end_search("the sweep")
    assert session.search_owner() is None and changes == ["the sweep", None]
    assert session.apply(RunSettings()) is None  # nothing runs: nothing to answer


def test_a_real_run_through_the_session(qtbot, session, bundled_model):
    rounds = []
    session.summary.connect(lambda s, is_last: rounds.append(s))
    settings = RunSettings(model_path=bundled_model, n_gen=4, n_ctx=128)
    assert session.start(settings) is None and session.is_running()
    qtbot.waitUntil(lambda: len(rounds) >= 1, timeout=60_000)
    assert session.apply(settings.with_changes(threads=1)) == "live"
    assert session.worker.run.settings.threads == 1
    with qtbot.waitSignal(session.run_finished, timeout=10_000):
        session.stop()
    assert not session.is_running() and not session.failed_now
    assert rounds[0].n_gen == 4 and session.timeline and session.last_sample is not None
