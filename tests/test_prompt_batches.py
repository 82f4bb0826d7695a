"""The prompt under a budget smaller than one layer's experts (issue #23): micro-batches.

A 4-layer Kimi-shaped model (deepseek2, 384 experts top-8; one layer's bank ~104 MB) streams at
--budget-mb 60, prompt and decode. Checked against sources the streamer does not compute:
llama.cpp's greedy tokens with no callback and the prompt in one llama_decode, llama.cpp's own
prompt-token counter, the routing ids llama.cpp hands the callback, the kernel's read_bytes and
mincore (--verify's outside watch).
"""

from __future__ import annotations

import csv
import os

import pytest

from conftest import verdict_line
from shardscope.engine.cli.cli import main
from shardscope.engine.experts.expert_run import ExpertRun
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout import budget_minimum as bm
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.measure.phase_progress import Progress
from shardscope.engine.measure.progress_words import progress_text

MIB = 1024 * 1024
PROMPT = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
          "movable metal type, oil-based ink and a wooden screw press")
N_GEN = 6
BUDGET = 60


@pytest.fixture(scope="module")
def kimi400(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import like_kimi_k2

    path = tmp_path_factory.mktemp("kimi400") / "kimi-400.gguf"
    write_synthetic_model(path, 400, n_layers=4, moe=like_kimi_k2(), seed=11)
    return str(path)


@pytest.fixture(scope="module")
def unconstrained(kimi400) -> list[int]:
    from shardscope.engine.stream.llama_session import LlamaSession

    with LlamaSession(kimi400, n_threads=2, n_ctx=128) as session:  # all resident, no callback, one pass
        return session.generate(PROMPT, N_GEN).tokens


def test_a_layers_bank_is_larger_than_the_budget(kimi400):
    moe = read_moe_layout(read_layout(kimi400))
    assert (moe.n_expert, moe.n_expert_used, len(moe.layers)) == (384, 8, 3)  # 1 dense + 3 MoE layers
    bank = moe.n_expert * moe.max_unit_bytes
    assert bank > BUDGET * MIB
    assert bm.min_budget_mb(moe, False) <= BUDGET


def test_prompt_and_decode_stream_at_60_mb_with_the_unconstrained_tokens(kimi400, unconstrained):
    settings = RunSettings(model_path=kimi400, budget_mb=BUDGET, n_gen=N_GEN, n_ctx=128, prompt=PROMPT)
    batches: list[tuple[int, int]] = []
    with ExpertRun(settings) as run:
        run.load()
        session_batches = run.session.on_prompt_batch

        def seen(i: int, n: int) -> None:
            batches.append((i, n))
            session_batches(i, n)

        run.session.on_prompt_batch = seen
        summary = run.run()
        records = run.routing_records().records
        tokens = list(run.tokens)
        cache_units = run.cache_bytes // bm.booked_unit_bytes(run.moe)
        n_p_eval = summary.n_prompt
    assert tokens == unconstrained
    m = summary.prompt_batch_tokens
    assert 0 < m < n_p_eval, (m, n_p_eval)
    n = -(-n_p_eval // m)
    assert batches == [(i, n) for i in range(n)]
    prompt = [r for r in records if r.prompt]
    assert len(prompt) == n * 3  # one routing record per MoE layer per batch
    assert max(len(r.experts) for r in prompt) <= cache_units  # each batch's union fit the cache
    # llama.cpp routed every prompt token, batch by batch; its last layer computes only the row
    # that gives logits: the batch's last token
    last = max(r.layer for r in prompt)
    for layer in {r.layer for r in prompt}:
        routed = sum(sum(r.counts) for r in prompt if r.layer == layer)
        assert routed == 8 * (n if layer == last else n_p_eval), layer
    assert summary.resident_weights_mb <= BUDGET
    assert summary.prompt_mb_read > 0


def test_bench_verify_at_60_mb_and_the_csv_row(kimi400, tmp_path, capsys):
    """The outside watch holds resident weights within the budget, prompt included; TTFT agrees with
    llama.cpp's own prompt-pass clock although the prompt went in several llama_decode calls."""
    out = tmp_path / "rows.csv"
    # 16 tokens: the 1 s window pair needs a second of decoding (4 tokens at 3.4 tok/s were 0.9 s: NOT CHECKED)
    rc = main(["bench", "--model", kimi400, "--budget-mb", str(BUDGET), "--tokens", "16", "--n-ctx", "128",
               "--prompt", PROMPT, "--verify", "--quiet", "--csv", str(out)])
    lines = capsys.readouterr().out.splitlines()
    checks = {line.split("  ")[1].strip() if line.startswith("  ") else "": line for line in lines
              if line.startswith("  ") and ("agrees" in line or "OFF" in line or "NOT CHECKED" in line)}
    for name in ("resident_weights_mb (timeline)", "resident_weights_mb (CSV, peak)", "ttft_ms (CSV)"):
        line = next(v for k, v in checks.items() if k.startswith(name))
        assert "agrees" in line, line  # compared, and within (issue 37's words: agrees / OFF / NOT CHECKED)
        if name.startswith("resident"):
            assert float(line.split()[3 if "peak" in name else 2]) <= BUDGET, line
    # Strict (issue 52): every pair compared and agreed, exit 0. (It once accepted 1 and 3: the
    # expert residency pair disagreed on small runs, and the timeline's read pairs, which waited for
    # 32 MiB and 10 MB/s, compared nothing in a 4-token expert run.)
    assert rc == 0, "\n".join(lines)
    n = sum(1 for line in lines if line.startswith("  ") and line.rstrip().endswith("]"))
    assert verdict_line("\n".join(lines)) == f"verify     {n} of {n} checked, {n} agree", "\n".join(lines)
    row = next(csv.DictReader(out.open()))
    assert 0 < int(row["prompt_batch_tokens"]) < int(row["n_prompt"])
    assert float(row["prompt_mb_read"]) > 0


def test_below_the_minimum_one_line_names_the_flag_and_nothing_is_written(kimi400, tmp_path, capsys):
    moe = read_moe_layout(read_layout(kimi400))
    minimum = bm.min_budget_mb(moe, False)
    out = tmp_path / "rows.csv"
    rc = main(["bench", "--model", kimi400, "--budget-mb", str(minimum - 1), "--tokens", "4", "--csv", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1, err
    assert f"the minimum is {minimum} MiB" in err and f"use --budget-mb {minimum} or more" in err
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p != "rows.csv"]


def test_progress_says_batch_i_of_n():
    p = Progress("prompt", 0.4, 0, 0, float("nan"), float("nan"), 1, 4, 2.0, 0, batch=2, n_batches=5)
    assert "batch 3 of 5" in progress_text(p)
    one = Progress("prompt", 0.4, 0, 0, float("nan"), float("nan"), 1, 4, 2.0, 0)
    assert "batch" not in progress_text(one)
