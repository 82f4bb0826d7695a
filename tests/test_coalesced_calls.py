"""widgets/coalesced_calls.py: events faster than a person reads reach a widget a few times a second,
none lost, none later than the interval."""

from __future__ import annotations

from shardscope.widgets.coalesced_calls import CoalescedCalls


def test_every_item_arrives_once_in_one_call_after_the_interval(qtbot) -> None:
    calls: list[list[int]] = []
    c = CoalescedCalls(100, calls.append)
    for i in range(50):
        c.push(i)
    assert calls == [] and c.pending() == 50  # nothing applied per push
    qtbot.waitUntil(lambda: bool(calls), timeout=10_000)
    assert calls == [list(range(50))]
    c.push(50)
    qtbot.waitUntil(lambda: len(calls) == 2, timeout=10_000)
    assert calls[1] == [50]


def test_keep_last_hands_the_newest_item_and_flush_applies_now(qtbot) -> None:
    seen: list[str] = []
    c = CoalescedCalls(10_000, seen.append, keep="last")
    for s in ("a", "b", "c"):
        c.push(s)
    c.flush()
    assert seen == ["c"] and c.pending() == 0
    c.flush()  # nothing pending: no call
    assert seen == ["c"]
    c.push("d")
    c.clear()  # dropped: a new model's panels must not get the old run's sample
    qtbot.wait(50)
    c.flush()
    assert seen == ["c"]


def test_leading_applies_the_first_push_after_a_quiet_interval_at_once(qtbot) -> None:
    seen: list[str] = []
    c = CoalescedCalls(300, seen.append, keep="last", leading=True)
    c.push("loading")
    assert seen == ["loading"]  # the first phase of a run shows when it begins
    for s in ("prompt", "generating", "prompt"):
        c.push(s)  # within the interval: they wait, the newest wins
    assert seen == ["loading"] and c.pending() == 1
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=10_000)
    assert seen == ["loading", "prompt"]
    qtbot.wait(400)  # quiet again
    c.push("generating")
    assert seen[-1] == "generating"


def test_run_view_shows_a_batch_from_its_last_round_start() -> None:
    """Tokens of two rounds in one batch: the text restarts from the prompt at the second round's
    first token (index 0) and holds only that round's pieces."""
    import pytest

    pytest.importorskip("PySide6")
    from PySide6.QtWidgets import QApplication, QPlainTextEdit

    QApplication.instance() or QApplication([])
    from shardscope.app.run_view.run_view import RunView

    view = RunView.__new__(RunView)  # only the text view is used here
    view.text_view = QPlainTextEdit()
    view.show_tokens([(0, " one"), (1, " two")], "P:")
    assert view.text_view.toPlainText() == "P: one two"
    view.show_tokens([(2, " three"), (0, " new"), (1, " round")], "P:")
    assert view.text_view.toPlainText() == "P: new round"
    view.show_tokens([(2, "!")], "P:")
    assert view.text_view.toPlainText() == "P: new round!"
