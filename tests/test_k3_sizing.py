"""Issue 50 item 5: ``size --like kimi-k3`` sizes Kimi K3's full published shape on the iPhone 16 Pro
presets — an answer with the trunk streamed beside the experts, not a refusal.

The figures are checked against the published ones, not against the sizing's own arithmetic: a cold
token's picks are 16 x 92 x 17,547,264 B = 25.83 GB (models-2026-facts), the trunk ~32 GB at 4 bits
(~27 GB of projections + ~2.4 GB routers + ~2.4 GB embedding and head), 2.78 T parameters.
"""

from __future__ import annotations

import re

import pytest

from shardscope.engine.cli.cli import main

UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def _size(capsys, *args: str) -> str:
    code = main(["size", "--like", "kimi-k3", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _bytes(line: str) -> float:
    value, unit = re.search(r"([\d.,]+) (kB|MB|GB|TB) per token", line).groups()
    return float(value.replace(",", "")) * UNITS[unit]


@pytest.mark.parametrize("device", ["iphone-16-pro", "iphone-16-pro-internal"])
def test_k3_full_shape_on_the_iphone_is_an_answer(capsys, device):
    out = _size(capsys, "--device", device, "--extended-limit")
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    experts = _bytes(lines["experts"])
    assert abs(experts - 25.83e9) / 25.83e9 < 0.02, lines["experts"]
    trunk = _bytes(lines["trunk"])
    assert 20e9 < trunk < 32e9, lines["trunk"]  # the trunk not held, read again every token
    assert "trunk share 100 %" in lines["split"] and "the engine's choice" in lines["split"]
    minimum = int(re.search(r"minimum\s+([\d,]+) MiB", out).group(1).replace(",", ""))
    assert 2_000 < minimum < 5_120  # above the embedding + head (~2.4 GB), below the entitled budget
    assert "TTFT" in lines and "per token" in lines["projection"]
    weights = re.search(r"weights\s+([\d.]+) TB \(([\d.]+)T params", out)
    assert abs(float(weights.group(2)) - 2.78) < 0.05  # 2.78 T parameters


def test_k3_without_the_entitlement_is_refused_naming_the_minimum(capsys):
    assert main(["size", "--like", "kimi-k3", "--device", "iphone-16-pro"]) == 2
    err = capsys.readouterr().err
    assert "below the minimum of" in err and "\n" not in err.strip()


@pytest.mark.parametrize("device", ["iphone-16-pro", "iphone-16-pro-internal"])
def test_the_worked_example_quotes_what_size_prints(capsys, device):
    """docs/sizing-example.md and docs/iphone-16-pro.md quote size's answer for K3: when the sizing
    changes, the pages must change with it (the s/token and the minimum as printed)."""
    from pathlib import Path

    out = _size(capsys, "--device", device, "--extended-limit")
    s_per_token = re.search(r"projection\s+([\d.,]+) s per token", out).group(1)
    minimum = re.search(r"minimum\s+([\d,]+) MiB", out).group(1)
    docs = Path(__file__).parents[1] / "docs"
    for page in ("sizing-example.md", "iphone-16-pro.md"):
        text = (docs / page).read_text()
        assert "size --like kimi-k3" in text, page
        assert f"{minimum} MiB" in text, (page, minimum)
        assert s_per_token in text, (page, device, s_per_token)


def test_the_refusal_names_the_larger_limit_only_where_it_would_fit(capsys):
    assert main(["size", "--like", "kimi-k3", "--device", "iphone-16-pro"]) == 2
    assert "--extended-limit sizes with the preset's 6,144 MiB app limit" in capsys.readouterr().err
    # already at the larger limit, or a budget given below the minimum: nothing more to offer
    assert main(["size", "--like", "kimi-k3", "--device", "iphone-16-pro", "--extended-limit", "--budget-mb",
                 "1000"]) == 2
    assert "--extended-limit" not in capsys.readouterr().err


def test_a_given_budget_below_the_minimum_is_not_answered_with_the_larger_limit(capsys):
    # the user chose the budget: the preset's larger limit would not change it
    assert main(["size", "--like", "kimi-k3", "--device", "iphone-16-pro", "--budget-mb", "1000"]) == 2
    err = capsys.readouterr().err
    assert "below the minimum of" in err and "--extended-limit" not in err
