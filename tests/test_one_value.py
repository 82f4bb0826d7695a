"""Issue 28: one figure, one value, one spelling — the refusals, words and units a new user met.

Each test fails on the code before the fix: ``--tokens 1`` ran the whole bench and wrote
its row; a prompt-only trace replayed to "nan %"; flags that change nothing were dropped
in silence; ranges printed as 1.04858e+06; "1 layers"; Python names where flags belong;
the -o md table said "± 0.00" and "?B".
"""

from __future__ import annotations

import json
import math

import pytest

from shardscope.engine.cli.cli import main
from test_outputs_checked_first import _refused, no_model_load  # noqa: F401  (one refusal helper, one fixture)


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("one-value-moe") / "m.gguf"
    write_synthetic_model(path, 24, n_layers=2, moe=MoeSpec(8, 2))
    return str(path)


# ------------------------------------------------------------------ item 2: nothing to time
def test_one_token_is_refused_before_the_load_with_nothing_written(small_moe, no_model_load, capsys, tmp_path):
    csv, timeline, trace = tmp_path / "r.csv", tmp_path / "t.csv", tmp_path / "x.jsonl"
    line = _refused(capsys, ["bench", "--model", small_moe, "--budget-mb", "30", "--tokens", "1", "--csv", str(csv),
                             "--timeline", str(timeline), "--trace", str(trace)], "--tokens 1", "--tokens 2")
    assert "n_gen" not in line
    assert list(tmp_path.iterdir()) == []  # no row, no timeline, no trace, no temp file


def _trace(path, records) -> str:
    header = {"shardscope_routing_trace": 1, "model": "m.gguf", "n_expert": 8, "n_expert_used": 2,
              "unit_bytes": {"0": 4096, "1": 4096}}
    path.write_text("\n".join(json.dumps(x) for x in [header, *records]) + "\n")
    return str(path)


def test_a_trace_without_decoded_tokens_is_refused_by_replay_and_plan(small_moe, capsys, tmp_path):
    prompt_only = _trace(tmp_path / "p.jsonl", [
        {"token": 0, "layer": 0, "experts": [1, 2], "counts": [3, 1], "prompt": True},
        {"token": 0, "layer": 1, "experts": [0, 5], "counts": [2, 2], "prompt": True}])
    _refused(capsys, ["replay", prompt_only, "--cache-mb", "1"], prompt_only, "no decoded tokens")
    _refused(capsys, ["plan", "--gguf", small_moe, "--trace", prompt_only, "--budget-mb", "20"],
             prompt_only, "no decoded tokens")
    # One decoded token is enough to replay: a finite hit rate, not "nan %".
    decoded = _trace(tmp_path / "d.jsonl", [
        {"token": 0, "layer": 0, "experts": [1, 2], "counts": [3, 1], "prompt": True},
        {"token": 1, "layer": 0, "experts": [1, 3]}, {"token": 1, "layer": 1, "experts": [0, 5]}])
    assert main(["replay", decoded, "--cache-mb", "1"]) == 0
    assert "nan" not in capsys.readouterr().out


# ------------------------------------------------------------------ item 8: nothing ignored in silence
def test_ssd_latency_without_an_emulated_ssd_is_refused(small_moe, no_model_load, capsys):
    _refused(capsys, ["bench", "--model", small_moe, "--budget-mb", "30", "--ssd-latency-us", "150"],
             "--ssd-latency-us 150", "--ssd-mb-s")
    _refused(capsys, ["bench", "--model", small_moe, "--budget-mb", "30", "--ssd-queue-depth", "4"],
             "--ssd-queue-depth 4", "--ssd-mb-s")


def test_like_kimi_refuses_a_flag_that_changes_its_ratios(capsys, tmp_path):
    out = tmp_path / "k.gguf"
    _refused(capsys, ["synth", "--moe", "--like", "kimi-k2", "--experts", "16", "--size-mb", "60", "--out", str(out),
                      "--quiet"], "--experts 16", "384", "--like kimi-k2")
    _refused(capsys, ["synth", "--moe", "--like", "kimi-k2", "--arch", "llama", "--size-mb", "60", "--out", str(out),
                      "--quiet"], "--arch llama")
    assert not out.exists()


def test_size_says_when_the_trace_is_not_used(small_moe, capsys, tmp_path):
    trace = _trace(tmp_path / "d.jsonl", [{"token": 1, "layer": 0, "experts": [1, 3]}])
    assert main(["size", "--gguf", small_moe, "--trace", trace]) == 0  # 24 MB fits the phone's budget
    out = capsys.readouterr().out
    assert "the whole model fits" in out
    assert f"--trace {trace} not used" in out


# ------------------------------------------------------------------ item 9: units and words
def test_plural_and_ordinary_numbers():
    from shardscope.engine.base.quantity_text import number_text, plural

    assert plural(1, "layer") == "1 layer" and plural(61, "layer") == "61 layers"
    assert plural(1, "token") == "1 token" and plural(0, "token") == "0 tokens"
    assert number_text(1_048_576) == "1,048,576" and number_text(16) == "16" and number_text(0.5) == "0.5"


def test_the_budget_refusal_counts_one_expert_as_one(tmp_path, capsys):
    """llama4 picks one expert a token: the refusal said "2 layers' picks of 1 experts"."""
    from shardscope.engine.cli.cli import main
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import defaults_for

    info = write_synthetic_model(tmp_path / "l4.gguf", 40, moe=defaults_for("llama4"))
    assert main(["bench", "--model", info.path, "--budget-mb", "1", "--tokens", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "2 layers' picks of 1 expert)" in err and "1 experts" not in err


def test_knob_ranges_print_as_ordinary_numbers():
    from shardscope.engine.base.errors import ShardscopeError
    from shardscope.engine.knobs.knob_ranges import parse_knob
    from shardscope.engine.knobs.settings import RunSettings, validate

    with pytest.raises(ShardscopeError) as err:
        validate(RunSettings(n_ctx=8))
    assert "16 to 1,048,576" in str(err.value) and "e+" not in str(err.value)
    with pytest.raises(ShardscopeError) as err:
        parse_knob("--budget-mb", "0", "budget_mb")  # the floor is 1 MiB (issue 23)
    assert "e+" not in str(err.value) and "1,048,576" in str(err.value)


def test_list_help_examples_lie_inside_each_knobs_range():
    from shardscope.engine.cli.cli_args import list_help
    from shardscope.engine.knobs.knob_ranges import parse_knob
    from shardscope.engine.knobs.knobs import KNOBS, SWEPT

    for key in SWEPT:
        example = list_help(key).split("e.g. ")[1]
        for part in example.split(" or "):
            parse_knob(KNOBS[key].flag, part, key)  # raises if any value is out of the knob's range


def test_memory_knobs_say_mib_like_the_charts():
    from shardscope.engine.cli.cli_args import flag_help
    from shardscope.engine.knobs.knobs import KNOBS

    for key in ("budget_mb", "shard_mb", "expert_cache_mb"):
        assert KNOBS[key].unit == "MiB"
        assert "(MiB)" in flag_help(key) and "(MB)" not in flag_help(key)


def test_size_names_flags_not_python_names(small_moe, capsys):
    assert main(["size", "--total-params", "20e9", "--bits", "8", "--layers", "61"]) == 0
    out = capsys.readouterr().out
    for python_name in ("budget_mb", "compute_s_per_token"):
        assert python_name not in out, python_name
    assert "--compute-s-per-token" in out and "--budget-mb" in out
    assert "61 layers" in out


def test_synth_and_size_print_one_number_for_one_file(capsys, tmp_path):
    out = tmp_path / "s.gguf"
    assert main(["synth", "--size-mb", "40", "--layers", "1", "--out", str(out), "--quiet"]) == 0
    wrote = capsys.readouterr().out
    assert "1 layer," in wrote and "1 layers" not in wrote
    size_in_synth = wrote.split(": ")[1].split(",")[0]  # "41.9 MB"
    assert main(["size", "--gguf", str(out)]) == 0
    weights = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("weights")][0]
    assert weights.split()[1] + " " + weights.split()[2] == size_in_synth, (wrote, weights)


# ------------------------------------------------------------------ item 7: -o md
def _rows(n_reps: int, model_type: str = "llama ?B Q8_0"):
    from shardscope.engine.output.llama_bench_format import LLAMA_BENCH_FIELDS, bench_row, render
    from shardscope.engine.stream.run_summary import RunSummary

    fields = {f: 0 for f in RunSummary.__dataclass_fields__}
    fields.update(model_filename="m.gguf", n_gen=32, n_prompt=11, n_threads=2, avg_ts=27.56, stddev_ts=6.91,
                  load_mechanism="", evict_mechanism="", policy="lru", text="", cache_hit_rate=math.nan,
                  on_time_rate=math.nan, resident_weights_mb=1.0)
    summaries = [RunSummary(**{k: v for k, v in fields.items() if k in RunSummary.__dataclass_fields__})
                 for _ in range(n_reps)]
    facts = {f: "x" for f in LLAMA_BENCH_FIELDS}
    facts.update(model_type=model_type, model_size=326_000_000, model_n_params=310_000_000, build_number=1,
                 n_batch=1, n_ubatch=1, poll=0, n_gpu_layers=0, main_gpu=0, no_op_offload=0, n_cpu_moe=0,
                 fit_target=0, fit_min_ctx=0, flash_attn=0, cpu_strict=False, no_kv_offload=False,
                 embeddings=False, no_host=False, repack=False)
    return render([bench_row(summaries, facts, test_time="t")], "md")


def test_md_shows_no_spread_for_one_repetition_and_no_unknown_size_class():
    one = _rows(1)
    assert "± 0.00" not in one and "27.56" in one
    assert "?B" not in one and "llama 310.00M Q8_0" in one
    assert "tg31 @ d11" in one and "decoded after the prompt" in one
    assert "27.56 ± 0.00" in _rows(2)  # two equal repetitions: a real spread of 0 between them


def test_an_automatic_expert_cache_reads_auto_not_0_mib():
    """The rounds table's "same in every round" note said "expert cache 0 MiB" beside a slider
    reading "auto 72 MiB": 0 means the budget's remainder, and every text of the knob says so."""
    from shardscope.engine.knobs.knobs import KNOBS

    spec = KNOBS["expert_cache_mb"]
    assert spec.text(0) == "auto" and spec.text(64) == "64 MiB"
