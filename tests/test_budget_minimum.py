"""One minimum budget for expert streaming (engine/layout/budget_minimum.py), and everything that
states it agreeing: the run's refusal (naming the knob that is too small), the prompt's micro-batch
size, ``size --model`` and ``bench`` on the same file, and the knob's range.

The arithmetic is checked by hand on small layouts (page size from the kernel, mmap.PAGESIZE),
and the CLI's figure against what the run then accepts on a real file.
"""

from __future__ import annotations

import mmap
import re

import pytest

from shardscope.engine.knobs.knob_refusal import KnobRefusal
from shardscope.engine.knobs.knobs import KNOBS
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout import budget_minimum as bm
from shardscope.engine.layout.moe_layout import MoeLayout

MIB = 1 << 20
PAGE = mmap.PAGESIZE


def _layout(n_expert=16, k=4, per_expert=(256 * 1024,) * 3, n_layers=3, dense_bytes=10 * MIB, base=PAGE):
    """Page-aligned expert slices (as synth writes them) after ``dense_bytes`` of dense tensors."""
    tensors, offset = {}, base + dense_bytes
    for layer in range(n_layers):
        entries = []
        for per in per_expert:
            entries.append((offset, per))
            offset += per * n_expert
        tensors[layer] = tuple(entries)
    return MoeLayout(path="/x/moe.gguf", architecture="llama", n_expert=n_expert, n_expert_used=k,
                     layers=tuple(range(n_layers)), expert_tensors=tensors,
                     dense_ranges=((base, base + dense_bytes),), total_bytes=offset - base)


def test_minimum_is_dense_plus_two_layers_of_picks():
    moe = _layout()
    unit = 3 * 256 * 1024  # three page-aligned slices: no edge pages
    assert bm.booked_unit_bytes(moe) == unit
    assert bm.min_budget_bytes(moe, speculation=False) == 10 * MIB + 2 * 4 * unit
    assert bm.min_budget_bytes(moe, speculation=True) == 10 * MIB + 3 * 4 * unit
    assert bm.min_budget_mb(moe, False) == 16  # 10 + 6 MiB exactly: no rounding up needed


def _pages_of_every_expert(per_expert, n_expert, n_layers, dense_bytes, base=PAGE) -> list[int]:
    """Bytes of whole pages each (layer, expert) touches, walked expert by expert from the offsets
    _layout lays out (not through MoeLayout or the module's edge arithmetic)."""
    offset, out = base + dense_bytes, []
    for _layer in range(n_layers):
        starts = []
        for per in per_expert:
            starts.append((offset, per))
            offset += per * n_expert
        for e in range(n_expert):
            out.append(sum((-(-(s + per * (e + 1)) // PAGE) - (s + per * e) // PAGE) * PAGE for s, per in starts))
    return out


def test_unaligned_slices_book_their_edge_pages_and_round_up():
    moe = _layout(per_expert=(1000, 3000, 5000), n_expert=8, k=2, dense_bytes=5000)
    # dense 5000 bytes from a page boundary: 2 pages resident.
    assert bm.resident_dense_bytes(moe) == 2 * PAGE
    worst = max(_pages_of_every_expert((1000, 3000, 5000), 8, 3, 5000))
    expected = 2 * PAGE + 2 * 2 * worst  # dense pages + 2 layers x k = 2 picks of the worst expert
    assert bm.booked_unit_bytes(moe) == worst
    assert bm.min_budget_bytes(moe, False) == expected
    assert bm.min_budget_mb(moe, False) == -(-expected // MIB)
    if PAGE == 4096:
        # By hand: experts start at 4096 + 5000 = 9096; layer 0's expert 3 has slices
        # [12096, 13096) [26096, 29096) [56096, 61096), each across one page boundary
        # (12288, 28672, 57344): 2 + 2 + 2 pages = 24,576 B for its 9,000 B. Minimum =
        # 8,192 + 2 x 2 x 24,576 = 106,496 B, 1 MiB rounded up.
        assert worst == 24_576 and bm.min_budget_bytes(moe, False) == 106_496 and bm.min_budget_mb(moe, False) == 1


def test_prompt_batch_fits_the_cache_whatever_the_routing():
    moe = _layout()  # unit 0.75 MiB, k = 4, 16 experts: a layer's bank is 12 MiB
    unit = 3 * 256 * 1024  # three page-aligned slices, no edge pages (as in the test above)
    assert bm.prompt_batch_tokens(moe, 2 * 4 * unit) == 2  # at the minimum: 2 tokens x 4 picks = the cache
    assert bm.prompt_batch_tokens(moe, 13 * unit) == 3  # 12 units used of 13
    assert bm.prompt_batch_tokens(moe, 16 * unit) == 0  # the whole bank fits: one pass
    for cache_units in range(8, 16):
        m = bm.prompt_batch_tokens(moe, cache_units * unit)
        assert m >= 2 and m * 4 <= cache_units


def _settings(**kw) -> RunSettings:
    return RunSettings(model_path="/x/moe.gguf", **kw)


def test_the_refusal_names_the_budget_when_the_budget_is_too_small():
    from shardscope.engine.experts.expert_run import cache_bytes_for

    moe = _layout()  # minimum 16 MB
    assert cache_bytes_for(moe, _settings(budget_mb=16)) == 6 * MIB
    with pytest.raises(KnobRefusal) as info:
        cache_bytes_for(moe, _settings(budget_mb=15))
    line = info.value.for_cli()
    assert "\n" not in line and "the minimum is 16 MiB" in line and line.endswith("use --budget-mb 16 or more")
    assert "Memory budget to at least 16 MiB" in info.value.for_window()


def test_the_refusal_names_the_expert_cache_when_that_is_too_small():
    """Issue #28 item 3: --budget-mb 100 --expert-cache-mb 10 named --budget-mb."""
    from shardscope.engine.experts.expert_run import cache_bytes_for

    moe = _layout()  # minimum cache 6 MB
    with pytest.raises(KnobRefusal) as info:
        cache_bytes_for(moe, _settings(budget_mb=100, expert_cache_mb=5))
    line = info.value.for_cli()
    assert line.startswith("--expert-cache-mb 5: ") and line.endswith("use --expert-cache-mb 6 or more"), line
    assert "--budget-mb" not in line
    assert "Expert cache to at least 6 MiB" in info.value.for_window()
    assert cache_bytes_for(moe, _settings(budget_mb=100, expert_cache_mb=6)) == 6 * MIB


def test_the_knob_range_accepts_any_budget_the_engine_accepts():
    moe = _layout(dense_bytes=PAGE, per_expert=(PAGE,), k=1, n_layers=1)  # a tiny model: minimum < 1 MB
    assert bm.min_budget_bytes(moe, False) < MIB
    assert KNOBS["budget_mb"].low <= 1 and KNOBS["budget_mb"].slider[0] <= 1


# ----------------------------------------------------------------- on real files
gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def qwen_like(tmp_path_factory) -> str:
    """128 experts top-8, qwen2moe, ~120 MB: one layer's bank far above the minimum's share."""
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("qwen") / "qwen-like.gguf"
    write_synthetic_model(path, 120, n_layers=4,
                          moe=MoeSpec(experts=128, experts_used=8, shared_experts=1, arch="qwen2moe"),
                          seed=5)
    return str(path)


def _size_minimum(capsys, path: str) -> int:
    from shardscope.engine.cli.cli import main

    assert main(["size", "--gguf", path]) == 0
    out = capsys.readouterr().out
    return int(re.search(r"minimum\s+([\d,]+) MiB", out).group(1).replace(",", ""))


def test_size_prints_the_minimum_the_run_accepts(capsys, qwen_like):
    from shardscope.engine.experts.expert_run import cache_bytes_for, moe_layout_for

    minimum = _size_minimum(capsys, qwen_like)
    moe = moe_layout_for(RunSettings(model_path=qwen_like, budget_mb=minimum))
    assert moe.n_expert == 128 and moe.n_expert_used == 8
    bank = moe.n_expert * moe.max_unit_bytes
    assert minimum * MIB < bm.resident_dense_bytes(moe) + bank  # a layer's bank is not needed
    assert cache_bytes_for(moe, RunSettings(model_path=qwen_like, budget_mb=minimum)) > 0
    with pytest.raises(KnobRefusal, match=f"the minimum is {minimum} MiB"):
        cache_bytes_for(moe, RunSettings(model_path=qwen_like, budget_mb=minimum - 1))


def test_plan_states_one_expert_cache_for_a_budget(capsys, qwen_like):
    """Issue #28 item 4: plan printed two cache sizes and bench used a third."""
    from shardscope.engine.cli.cli import main
    from shardscope.engine.experts.expert_run import cache_bytes_for, moe_layout_for

    budget = 60
    assert main(["plan", "--gguf", qwen_like, "--budget-mb", str(budget), "--expert-hit-rate", "0.3"]) == 0
    out = capsys.readouterr().out
    caches = {float(x.replace(",", "")) for x in re.findall(r"([\d.,]+) MiB expert cache|expert cache ([\d.,]+) MiB",
                                                            out)
              for x in x if x}
    settings = RunSettings(model_path=qwen_like, budget_mb=budget)
    run_cache = cache_bytes_for(moe_layout_for(settings), settings) / MIB
    assert caches and all(abs(c - run_cache) < 0.5 for c in caches), (caches, run_cache, out)


def test_the_windows_budget_slider_starts_at_the_models_minimum(qtbot, tmp_path, qwen_like):
    from tests.conftest import make_window

    window = make_window(qtbot, tmp_path / "config")
    try:
        window.open_model(qwen_like)
        qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.path == qwen_like, timeout=30_000)
        slider = window.controls.sliders["budget_mb"].slider
        moe = window.model_info.moe
        assert slider.minimum() == bm.min_budget_mb(moe, False)
        from shardscope.engine.experts.expert_run import cache_bytes_for

        assert cache_bytes_for(moe, RunSettings(model_path=qwen_like, budget_mb=slider.minimum())) > 0
    finally:
        window.close()


def test_a_budget_below_the_floor_is_raised_to_it_and_said_beside_the_slider(qtbot, tmp_path, qwen_like):
    """A profile's budget under the model's minimum: the slider offers only what runs (issue 48,
    item 4), so it shows the floor, and the note beside it says what it was raised from."""
    from tests.conftest import make_window

    window = make_window(qtbot, tmp_path / "config")
    try:
        window.open_model(qwen_like)
        qtbot.waitUntil(lambda: window.model_info is not None and window.model_info.path == qwen_like, timeout=30_000)
        window.apply_settings(RunSettings(budget_mb=1))
        floor = window.controls.sliders["budget_mb"].slider.minimum()
        assert window.controls.value("budget_mb") == floor == window.current_settings().budget_mb
        assert window.notes()["budget_mb"].startswith(f"budget 1\u2192{floor} MiB")
    finally:
        window.close()
