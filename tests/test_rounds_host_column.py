"""The rounds table flags a round whose host stalled (issue 48 item 2): a "host stalled" column."""

from __future__ import annotations

from conftest import blank_summary
from shardscope.app.rounds.rounds import Round, round_columns, round_values, rounds_csv_rows
from shardscope.engine.devices.run_projection import round_stall
from shardscope.engine.knobs.settings import RunSettings


def test_a_stalled_round_is_flagged_in_the_table_and_its_export():
    clean = blank_summary(model_filename="m.gguf", avg_ts=20.0, ttft_ms=200.0)
    clean.token_s = (0.05,) * 8
    stalled = blank_summary(model_filename="m.gguf", avg_ts=1.5, ttft_ms=200.0)
    stalled.token_s = (0.05,) * 3 + (5.05,) + (0.05,) * 4  # a 5-s SIGSTOP in the fourth decoded token
    rounds = [Round(1, RunSettings(), clean, 0.0, 1.0, stall=round_stall(clean)),
              Round(2, RunSettings(), stalled, 1.0, 7.0, stall=round_stall(stalled, 0.0, 200.0))]
    assert "host" in [c.key for c in round_columns()]
    assert round_values(rounds[0])["host"] == ""
    assert round_values(rounds[1])["host"].startswith("host stalled 5.0 s (token 5)")
    columns, rows = rounds_csv_rows(rounds, None)
    assert "host" in columns and rows[1]["host"] and not rows[0]["host"]
