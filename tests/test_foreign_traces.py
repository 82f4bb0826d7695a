"""Issue 25, 1: real routers' traces as they are fetched (BigMoeOnEdge's route_trace v1) and a plain
CSV, read into the RoutingTrace every replay consumer uses; a bad file is one line naming it.

The figures are checked against the CSV read here with the csv module, not against the reader.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.cli.cli import main
from shardscope.engine.experts.foreign_traces import load_trace
from shardscope.engine.experts.routing_trace import read_trace
from shardscope.engine.experts.trace_stats import trace_stats

TRACES = Path(__file__).parent / "data" / "route-traces"
# trace → (layers, experts per token and layer, decoded tokens), from BigMoeOnEdge's findings
SHAPES = {"qwen": (48, 6, 128), "gemma": (30, 6, 128), "gptoss": (36, 2, 64)}


def _rows(name: str) -> list[dict]:
    with open(TRACES / f"{name}.route.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(line for line in handle if not line.startswith("#")))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_route_trace_v1_is_read_as_fetched(name):
    layers, k, decoded = SHAPES[name]
    trace = load_trace(TRACES / f"{name}.route.csv")
    rows = _rows(name)
    assert trace.header.n_expert == 128 and trace.header.n_expert_used == k
    assert len(trace.header.unit_bytes) == layers and trace.n_decoded == decoded
    # every decoded (step, layer) is one record with the row order's picks and weights
    picks = defaultdict(list)
    for r in rows:
        if r["phase"] == "1":
            picks[(int(r["step"]), int(r["layer"]))].append((int(r["expert"]), float(r["weight"])))
    records = [r for r in trace.records if not r.prompt]
    assert len(records) == len(picks) == layers * decoded
    for record in records:
        assert list(zip(record.experts, record.weights)) == picks[(record.token, record.layer)]
    # the prompt pass: one union per layer, counts = prompt tokens that picked each expert
    prompt_counts = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if r["phase"] == "0":
            prompt_counts[int(r["layer"])][int(r["expert"])] += 1
    prompt = [r for r in trace.records if r.prompt]
    assert [r.layer for r in prompt] == sorted(prompt_counts)
    assert all(dict(zip(r.experts, r.counts)) == prompt_counts[r.layer] for r in prompt)
    # one expert's bytes per layer: the expert_bytes column of the rows that loaded one
    loaded = {int(r["layer"]): int(r["expert_bytes"]) for r in rows if r["residency"] == "0"}
    assert trace.header.unit_bytes == loaded


def test_replay_runs_on_the_fetched_file(capsys):
    assert main(["replay", str(TRACES / "gptoss.route.csv"), "--cache-mb", "908,1816"]) == 0
    out = capsys.readouterr().out
    for policy in ("decay", "lru", "lfu", "hot", "optimal"):
        assert out.count(f"| {policy} |") == 2, policy
    assert "gpt-oss-120b-Q4_K_M.gguf" in out


def test_plain_csv_is_read(tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text("# model=toy n_expert=8\n# expert_bytes=1000\n# layer=1 expert_bytes=2000\n"
                    "token,layer,expert,weight,prompt\n"
                    "0,0,3,0.5,1\n0,0,4,0.5,1\n1,0,3,0.6,1\n1,0,5,0.4,1\n0,1,1,1.0,1\n0,1,2,0.5,1\n1,1,1,0.5,1\n1,1,2,0.5,1\n"
                    "2,0,3,0.7,0\n2,0,6,0.3,0\n2,1,2,0.9,0\n2,1,7,0.1,0\n3,0,3,0.5,0\n3,0,4,0.5,0\n3,1,1,0.5,0\n3,1,2,0.5,0\n")
    trace = load_trace(path)
    assert trace.header.unit_bytes == {0: 1000, 1: 2000}
    assert (trace.header.n_expert, trace.header.n_expert_used, trace.header.model) == (8, 2, "toy")
    prompt = [r for r in trace.records if r.prompt]
    assert [(r.layer, r.experts, r.counts) for r in prompt] == [(0, (3, 4, 5), (2, 1, 1)), (1, (1, 2), (2, 2))]
    decoded = [(r.token, r.layer, r.experts, r.weights) for r in trace.records if not r.prompt]
    assert decoded[0] == (2, 0, (3, 6), (0.7, 0.3)) and decoded[-1] == (3, 1, (1, 2), (0.5, 0.5))
    # the minimal form: three columns, one size for every layer, no prompt
    short = tmp_path / "short.csv"
    short.write_text("token,layer,expert\n# expert_bytes=4096\n"
                     "0,0,1\n0,0,2\n0,1,0\n0,1,3\n1,0,1\n1,0,2\n1,1,3\n1,1,0\n")
    trace = load_trace(short)
    assert trace.n_decoded == 2 and not any(r.prompt for r in trace.records)


def test_route_trace_turns_extra_columns_and_row_sizes(tmp_path):
    """Another engine's route_trace v1: a second turn whose steps start again at 0, a column
    this reader does not know, and no '# layer=' lines (the sizes come from the rows)."""
    rows = ["turn,phase,step,layer,slot,expert,weight,residency,expert_bytes,latency_us"]
    for turn in (0, 1):
        rows += [f"{turn},0,0,0,0,{turn + 1},0.5,0,0,9", f"{turn},0,0,1,0,{turn + 2},0.5,0,0,9"]
        for step in (1, 2):
            for layer in (0, 1):
                rows.append(f"{turn},1,{step},{layer},0,{(step + layer + turn) % 4},0.7,0,{100 + layer},9")
    path = tmp_path / "turns.csv"
    path.write_text("# route_trace v1\n# model=m n_expert=4 n_expert_used=1\n" + "\n".join(rows) + "\n")
    trace = load_trace(path)
    assert trace.header.unit_bytes == {0: 100, 1: 101}
    decoded = [r for r in trace.records if not r.prompt]
    assert len(decoded) == 8 and len({(r.token, r.layer) for r in decoded}) == 8  # turn 1's step 1 is not turn 0's
    assert [r.experts for r in decoded if r.layer == 0] == [(1,), (2,), (2,), (3,)]
    assert sum(r.prompt for r in trace.records) == 4  # one prompt pass per turn, a record per layer
    assert trace_stats(trace).layers[0].tokens == 4
    worded = tmp_path / "worded.csv"  # the phase as a word, as another writer may put it
    lines = [line.split(",") for line in path.read_text().splitlines()]
    for cells in lines:
        if len(cells) > 1 and cells[1] in ("0", "1"):
            cells[1] = {"0": "prefill", "1": "Decode"}[cells[1]]
    worded.write_text("\n".join(",".join(cells) for cells in lines) + "\n")
    assert load_trace(worded) == trace


def test_shardscope_json_lines_still_read(tmp_path):
    path = tmp_path / "own.jsonl"
    path.write_text('{"shardscope_routing_trace": 1, "model": "m", "n_expert": 4, "n_expert_used": 1, '
                    '"unit_bytes": {"0": 10}}\n{"token": 1, "layer": 0, "experts": [2], "weights": [1.0]}\n')
    assert load_trace(path) == read_trace(path)


@pytest.mark.parametrize("text, defect", [
    ("hello,world\n1,2\n", "line 1: not a routing trace format"),
    ("# route_trace v1\n# layer=0 expert_bytes=10\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
     "0,1,0,0,0,3,0.5,0\n", "line 4: 8 fields, expected 9"),
    ("# route_trace v1\n# layer=0 expert_bytes=10\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
     "0,2,0,0,0,3,0.5,0,10\n", "line 4: phase must be 0 (prefill) or 1 (decode), got 2"),
    ("# route_trace v1\n# layer=0 expert_bytes=10\nturn,phase,step,layer,slot,expert,weight,residency,expert_bytes\n"
     "0,1,0,1,0,3,0.5,0,0\n", "line 4: layer 1 has no expert size"),
    ("# route_trace v1\nturn,step,layer,slot,expert\n", "line 2: expected the column header"),
    ("token,layer,expert\n# expert_bytes=10\n0,0,x\n", "line 3: 'expert' must be a whole number, got 'x'"),
    ("token,layer,expert,weight\n# expert_bytes=10\n0,0,1,nan\n", "line 3: 'weight' must be a finite number"),
    ("token,layer,expert\n# expert_bytes=10\n0,0,1\n0,0,1\n", "line 4: expert 1 picked twice by token 0 in layer 0"),
    ("token,layer,expert,prompt\n# expert_bytes=10\n0,0,1,1\n", "no decoded tokens"),
    ("# n_expert=4\ntoken,layer,expert\n# expert_bytes=10\n0,0,4\n", "line 4: expert 4 is not below n_expert=4"),
])
def test_a_bad_file_is_one_line_with_its_line_number(tmp_path, capsys, text, defect):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ShardscopeError, match="^" + str(path).replace(".", r"\.")) as err:
        load_trace(path)
    assert defect in str(err.value) and "\n" not in str(err.value)
    assert main(["replay", str(path), "--cache-mb", "1"]) == 2
    assert defect in capsys.readouterr().err


def test_plan_reads_a_foreign_trace(capsys):
    """plan --trace replays the fetched file for the expert hit rate (the default policy), its header the model;
    parameter counts beside a header that has the bytes are refused (issue 33: they gave 1.63 GB of picks a token
    where the header gives 823 MB)."""
    assert main(["plan", "--trace", str(TRACES / "qwen.route.csv")]) == 0
    out = capsys.readouterr().out
    assert "replayed from the trace of /data/local/tmp/shardllm/Qwen3-30B-A3B-Q4_K_M.gguf, auto, 128 tokens" in out
    assert "bytes from  the trace header of" in out and "a token's picks 823 MB" in out
    assert main(["plan", "--total-params", "30.5e9", "--active-params", "3.3e9", "--bits", "4.8", "--layers", "48",
                 "--trace", str(TRACES / "qwen.route.csv")]) == 2
    err = capsys.readouterr().err
    assert "header gives the model's bytes per layer; --total-params would describe another model" in err
