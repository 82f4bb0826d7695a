"""Every synth architecture × expert format, as a user runs them: synth, bench unconstrained,
bench at a small budget; prints the docs/architectures.md table (issue 27).

    python -m bench.sweeps.arch_matrix --jobs 6 --dir /tmp/arch-matrix

Each cell is the project's CLI in its own process (`shardscope synth --moe --arch A --quant Q
--size-mb 240`, then `bench --tokens 8` with and without `--budget-mb 90`, `--csv` for the row; the
budget run with `--verify`, whose last line says how many of its pairs were checked and agreed).
`--synth-args` adds synth flags to every cell (e.g. "--routing uniform --experts 256" so a run reads
enough per token for --verify's 1-second windows).
Checked outside the engine: the text each bench printed (identical or not), the gguf package's
byte count of one token's picks (experts used × every MoE layer's gate+up+down slice) and the
kernel's read bytes (the row's read_mb_per_token is /proc/<pid>/io). A combination synth refuses
(exit 2, one line) is listed as refused with its line. Speeds are not shown: the jobs share cores.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ARCHS = ["qwen3moe", "gpt-oss", "glm4moe", "llama4", "gemma4", "qwen3next", "kimi-k2", "deepseek3", "deepseek2",
         "llama", "qwen2moe", "kimi-k3", "deepseek4", "qwen35moe", "minimax-m3", "glm5-next"]
QUANTS = ["default", "q4_k_m", "mxfp4"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", *args], capture_output=True, text=True)


def picked_mb_per_token(path: Path) -> tuple[float, int, int, str]:
    """(MiB of one token's picks, the unit of the row's per-token figures; MoE layers, layers, expert type)
    by the gguf package's reader."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    fields = {f.name: f for f in reader.fields.values()}
    arch = bytes(fields["general.architecture"].parts[-1]).decode()
    used = int(fields[f"{arch}.expert_used_count"].parts[-1][0])
    n_layers = int(fields[f"{arch}.block_count"].parts[-1][0])
    total, moe_layers, types = 0, set(), set()
    for t in reader.tensors:
        name = t.name
        if any(name.endswith(f"ffn_{p}_exps.weight") for p in ("gate", "up", "down", "gate_up")):
            n_expert = int(t.shape[-1])  # gguf lists dims innermost first: the expert index is last
            total += int(t.n_bytes) // n_expert * used
            moe_layers.add(name.split(".")[1])
            types.add(t.tensor_type.name)
    return total / 2**20, len(moe_layers), n_layers, "/".join(sorted(types))


def one(arch: str, quant: str, args) -> dict:
    out = Path(args.dir) / f"{arch}-{quant}.gguf"
    row = {"arch": arch, "quant": quant}
    flags = ["synth", "--moe", "--arch", arch, "--size-mb", str(args.size_mb), "--out", str(out), "--quiet",
             *args.synth_args.split()]
    if quant != "default":
        flags += ["--quant", quant]
    done = cli(*flags)
    if done.returncode != 0:
        row["refused"] = (done.stderr or done.stdout).strip().splitlines()[-1] if (done.stderr or done.stdout) else "?"
        row["exit"] = done.returncode
        return row
    row["file_mb"] = out.stat().st_size / 1e6
    row["picked"], row["moe_layers"], row["layers"], row["types"] = picked_mb_per_token(out)
    texts = []
    for budget in (None, args.budget_mb):
        table = Path(args.dir) / f"{arch}-{quant}-{budget or 'all'}.csv"
        table.unlink(missing_ok=True)
        bench = ["bench", "--model", str(out), "--tokens", str(args.tokens), "--threads", str(args.threads),
                 "--csv", str(table)]
        if budget is not None:
            bench += ["--budget-mb", str(budget), "--verify"]
        done = cli(*bench)
        if budget is not None:  # --verify: exit 1 a pair disagreed, 3 a pair had nothing to compare
            row["verify"] = next((line.split("verify", 1)[1].strip() for line in done.stdout.splitlines()[::-1]
                                  if line.startswith("verify") and "checked" in line), "?")
            row["verify_exit"] = done.returncode
        if done.returncode not in (0, 1, 3):
            row[f"error_{budget or 'all'}"] = (done.stderr or done.stdout).strip().splitlines()[-1:]
            return row
        texts.append(next((line for line in done.stdout.splitlines() if line.startswith("text")), ""))
        with open(table, newline="") as handle:
            row[budget or "all"] = list(csv.DictReader(handle))[-1]
    row["identical"] = texts[0] == texts[1] and bool(texts[0])
    row["text"] = texts[1]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archs", default=",".join(ARCHS))
    parser.add_argument("--quants", default=",".join(QUANTS))
    parser.add_argument("--size-mb", type=int, default=240)
    parser.add_argument("--budget-mb", type=int, default=90)
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--dir", default="/tmp/shardscope-arch-matrix")
    parser.add_argument("--synth-args", default="", help="more synth flags for every cell, e.g. \"--routing uniform\"")
    args = parser.parse_args()
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    cells = [(a, q) for a in args.archs.split(",") for q in args.quants.split(",")]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda c: one(*c, args), cells))
    print(f"| --arch | --quant | MoE layers | expert types | file MB | streams at {args.budget_mb} "
          "MiB | text identical "
          "| read MiB/token | expert MiB/token | picked MiB/token | expert hit rate | --verify |")
    print("|---|---|---|---|---:|---|---|---:|---:|---:|---:|---|")
    refused = []
    for r in rows:
        if "refused" in r:
            refused.append(f"- {r['arch']} {r['quant']}: refused (exit {r['exit']}): {r['refused']}")
            continue
        if "error_all" in r or f"error_{args.budget_mb}" in r:
            print(f"| {r['arch']} | {r['quant']} | FAILED: {r.get('error_all') or r.get(f'error_{args.budget_mb}')} |")
            continue
        s = r[args.budget_mb]
        print(f"| {r['arch']} | {r['quant']} | {r['moe_layers']} of {r['layers']} | {r['types']} | {r['file_mb']:.0f} "
              f"| yes | {'yes' if r['identical'] else 'NO'} | {float(s['read_mb_per_token']):.2f} "
              f"| {float(s['expert_mb_per_token']):.2f} | {r['picked']:.2f} | {float(s['expert_hit_rate']):.2f} "
              f"| {r.get('verify', '?')} |")
    print("\n".join(refused))
    bad = [r for r in rows if "refused" not in r and (not r.get("identical") or r.get("verify_exit") == 1)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
