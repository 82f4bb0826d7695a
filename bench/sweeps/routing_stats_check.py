"""Does the default synthetic MoE route like a real one? Checked from outside the engine.

Writes the default ``synth --moe --experts 128 --experts-used 8 --layers 8`` model, runs
``shardscope bench --budget-mb 150 --tokens 96 --trace t.jsonl`` (expert streaming) and the
same unconstrained (a budget above the model's size), then reads the trace's JSON lines
itself (no engine code: its own parser and its own arithmetic) and prints the routing
statistics against the targets of issue #26 (real Qwen3-30B-A3B: lag-1 38.0 %, lag-8
26.7 %, static top-k 37.5 %, 64 of 128 distinct, hottest-8 21.5 % → 44.5 %), and whether
the greedy text is identical under streaming. Exit 1 if a target is missed.

    python -m bench.sweeps.routing_stats_check [--size-mb 400] [--routing real|uniform] [--keep DIR]
    python -m bench.sweeps.routing_stats_check --arch gpt-oss --size-mb 200   # an arch's own expert counts and depth
    python -m bench.sweeps.routing_stats_check --trace t.jsonl          # only the statistics of a trace
    python -m bench.sweeps.routing_stats_check --route-csv qwen.route.csv  # a BigMoeOnEdge route_trace v1 CSV
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

SHARDSCOPE = [sys.executable, "-m", "shardscope.engine.cli.cli"]  # the CLI, wherever the package is
TARGETS = (  # (name, test, wording) over the all-layer means
    ("lag-1", lambda s: s["lag1"] >= 0.28, "≥ 28 %"),
    ("lag-8", lambda s: s["lag8"] >= 0.18, "≥ 18 %"),
    ("lag-1 − lag-8", lambda s: s["lag1"] - s["lag8"] >= 0.04, "≥ 4 points"),
    ("static top-k", lambda s: s["topk"] >= 0.28, "≥ 28 %"),
    ("distinct", lambda s: 0.30 <= s["distinct"] / s["n_expert"] <= 0.70, "30–70 % of the experts"),
    ("hottest-8 last − first third", lambda s: s["h8_last"] - s["h8_first"] >= 0.05, "≥ 5 points"),
)


def read_jsonl(path: str) -> tuple[dict, dict[int, list[set]]]:
    """(header, layer → the decoded tokens' picks in token order)."""
    lines = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    by_layer: dict[int, dict[int, set]] = {}
    for rec in lines[1:]:
        if not rec.get("prompt"):
            by_layer.setdefault(rec["layer"], {})[rec["token"]] = set(rec["experts"])
    return lines[0], {l: [t[k] for k in sorted(t)] for l, t in by_layer.items()}


def read_route_csv(path: str) -> tuple[dict, dict[int, list[set]]]:
    """BigMoeOnEdge's ``# route_trace v1`` CSV (turn,phase,step,layer,slot,expert,...), decode rows."""
    header, cells = {}, {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("#"):
            for word in line[1:].split():
                if "=" in word:
                    key, value = word.split("=", 1)
                    header.setdefault(key, value)
            continue
        if line.startswith("turn,") or not line.strip():
            continue
        turn, phase, step, layer, _slot, expert = (int(x) for x in line.split(",")[:6])
        if phase == 1:
            cells.setdefault(layer, {}).setdefault((turn, step), set()).add(expert)
    head = {"n_expert": int(header["n_expert"]), "n_expert_used": int(header["n_expert_used"])}
    return head, {l: [t[k] for k in sorted(t)] for l, t in cells.items()}


def stats(header: dict, by_layer: dict[int, list[set]]) -> dict:
    k = header["n_expert_used"]
    rows = []
    for layer in sorted(by_layer):
        seq = by_layer[layer]
        lag = {n: sum(len(seq[i] & seq[i - n]) for i in range(n, len(seq))) / sum(len(s) for s in seq[n:])
               for n in (1, 8)}
        counts = sorted(Counter(e for s in seq for e in s).values(), reverse=True)
        total = sum(counts)
        rows.append((layer, lag[1], lag[8], sum(counts[:k]) / total, len(counts), sum(counts[:8]) / total))
    third = max(1, len(rows) // 3)
    mean = lambda i, part=rows: sum(r[i] for r in part) / len(part)  # noqa: E731
    return {"rows": rows, "lag1": mean(1), "lag8": mean(2), "topk": mean(3), "distinct": mean(4),
            "hottest8": mean(5), "h8_first": mean(5, rows[:third]), "h8_last": mean(5, rows[-third:]),
            "n_expert": header["n_expert"], "k": k, "tokens": len(next(iter(by_layer.values())))}


def report(s: dict) -> bool:
    print(f"{s['tokens']} decoded tokens, {s['n_expert']} experts, top-{s['k']} (random reuse "
          f"{100 * s['k'] / s['n_expert']:.1f} %)")
    print("layer  lag-1   lag-8   top-k   distinct  hottest-8")
    for layer, l1, l8, tk, d, h8 in s["rows"]:
        print(f"{layer:5d} {100 * l1:6.1f}% {100 * l8:6.1f}% {100 * tk:6.1f}% {d:6d}    {100 * h8:6.1f}%")
    print(f"  all {100 * s['lag1']:6.1f}% {100 * s['lag8']:6.1f}% {100 * s['topk']:6.1f}% {s['distinct']:6.1f}    "
          f"{100 * s['hottest8']:6.1f}%   hottest-8 first third {100 * s['h8_first']:.1f}% → last "
          f"{100 * s['h8_last']:.1f}%")
    ok = True
    for name, test, wording in TARGETS:
        good = test(s)
        ok &= good
        print(f"{'ok  ' if good else 'MISS'} {name} {wording}")
    return ok


def bench_text(model: str, budget_mb: int, tokens: int, trace: str | None) -> str:
    # not --quiet: that would drop the "text" line
    cmd = [*SHARDSCOPE, "bench", "--model", model, "--budget-mb", str(budget_mb), "--tokens", str(tokens)]
    if trace:
        cmd += ["--trace", trace]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return next(line for line in out.splitlines() if line.startswith("text "))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=int, default=400)
    p.add_argument("--routing", choices=("real", "uniform"), default=None, help="default: synth's default")
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--budget-mb", type=int, default=150)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arch", help="synth --arch A with that arch's expert counts and default depth "
                   "(the targets are the 128×8 llama-style synth's; other archs: reported)")
    p.add_argument("--keep", help="write the model and trace here instead of a temp dir")
    p.add_argument("--trace", help="only report this trace (JSON lines)")
    p.add_argument("--route-csv", help="only report this BigMoeOnEdge route_trace v1 CSV")
    args = p.parse_args()
    if args.trace:
        return 0 if report(stats(*read_jsonl(args.trace))) else 1
    if args.route_csv:
        return 0 if report(stats(*read_route_csv(args.route_csv))) else 1
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        model, trace = str(where / f"synth-moe-{args.arch or '128x8'}.gguf"), str(where / "t.jsonl")
        shape = ["--arch", args.arch] if args.arch else ["--experts", "128", "--experts-used", "8", "--layers", "8"]
        cmd = [*SHARDSCOPE, "synth", "--moe", *shape,
               "--size-mb", str(args.size_mb), "--seed", str(args.seed), "--out", model, "--quiet"]
        if args.routing:
            cmd += ["--routing", args.routing]
        print(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip())
        streamed = bench_text(model, args.budget_mb, args.tokens, trace)
        whole = bench_text(model, max(4096, args.size_mb * 2), args.tokens, None)
        ok = report(stats(*read_jsonl(trace)))
        same = streamed == whole
        print(f"{'ok  ' if same else 'MISS'} greedy text identical under expert streaming (budget "
              f"{args.budget_mb} MB) and unconstrained: {streamed[:80]}…")
        if not same:
            print(f"     unconstrained: {whole[:80]}…")
        return 0 if ok and same else 1


if __name__ == "__main__":
    sys.exit(main())
