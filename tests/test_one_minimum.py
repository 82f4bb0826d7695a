"""Issue 48 item 3: one minimum for every model, dense included — the minimum ``size --model`` prints
is the one ``bench`` accepts, one MiB less is refused, and the refusal's "minimum" and its advice are
the same number; the slider's floor and the knob range read the same definition
(engine/layout/budget_minimum.py minimum_for).

Across the bundled gemma, a dense synth and every arch synth writes. ``bench`` is the real CLI on a
real file: accepted means a run that loads and decodes; refused means exit 2 with one line.
"""

from __future__ import annotations

import re

import pytest

from shardscope.engine.cli.cli import SYNTH_ARCHES, main
from shardscope.engine.knobs.knob_ranges import runnable_range
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.budget_minimum import minimum_for
from shardscope.engine.synth.synth_arch_specs import NOT_WRITTEN

ARCHES = [a for a in SYNTH_ARCHES if a not in NOT_WRITTEN]


def _size_minimum(capsys, path: str, *extra: str) -> int:
    assert main(["size", "--gguf", path, *extra]) == 0
    out = capsys.readouterr().out
    return int(re.search(r"minimum\s+([\d,]+) MiB", out).group(1).replace(",", ""))


def _bench(capsys, path: str, budget: int, *extra: str) -> tuple[int, str]:
    code = main(["bench", "--model", path, "--budget-mb", str(budget), "--tokens", "2", "--n-ctx", "64",
                 "--quiet", *extra])
    return code, capsys.readouterr().err


def _one_minimum(capsys, path: str, *extra: str) -> None:
    minimum = _size_minimum(capsys, path, *extra)
    code, err = _bench(capsys, path, minimum - 1, *extra)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    # the refusal states the number size printed, and advises that same number: never "185 ... at least 186"
    assert f"the minimum is {minimum} MiB" in line and f"--budget-mb {minimum} or more" in line, line
    assert "\n" not in line and "MB " not in line  # one line, MiB
    code, err = _bench(capsys, path, minimum, *extra)
    assert code == 0, err
    knobs = {"shard_mb": 64, "prefetch_depth": 2}
    for flag, value in zip(extra[::2], extra[1::2]):
        knobs[flag.lstrip("-").replace("-", "_")] = int(value)
    settings = RunSettings(model_path=path, **knobs)
    assert minimum_for(settings).mb == minimum  # what the window's budget slider starts at
    assert runnable_range("budget_mb", settings)[0] == minimum  # the knob range


def test_the_bundled_model(capsys):
    from shardscope.engine.base.bundled_model import resolve_model_path

    path = resolve_model_path(None)
    _one_minimum(capsys, path)
    _one_minimum(capsys, path, "--shard-mb", "16")  # a budget that streams: 185 / 186 / 178 were three answers


def test_a_dense_synth(capsys, tmp_path):
    path = str(tmp_path / "dense.gguf")
    assert main(["synth", "--size-mb", "12", "--layers", "4", "--out", path, "--quiet"]) == 0
    _one_minimum(capsys, path, "--shard-mb", "1")


@pytest.mark.parametrize("arch", ARCHES)
def test_every_synth_arch(capsys, tmp_path, arch):
    path = str(tmp_path / f"{arch}.gguf")
    assert main(["synth", "--moe", "--arch", arch, "--size-mb", "16", "--layers", "4", "--experts", "16",
                 "--out", path, "--quiet"]) == 0
    capsys.readouterr()
    _one_minimum(capsys, path, "--shard-mb", "1")
