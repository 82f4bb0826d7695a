"""Every file synth writes loads: random synth --moe flag combinations, each written and then
loaded by llama.cpp in a child process (an abort there kills only the child).

    python -m bench.sweeps.synth_fuzz --cases 150 --seed 1
    python -m bench.sweeps.synth_fuzz --cases 60 --seed 3 --stream   # and each file that loads streams

With --stream every file that loads is also benched (`bench --tokens 6`) unconstrained and at
60 % of its size: the greedy text must be the same (a budget the engine refuses is reported).

A case ends as one of: refused (synth exit 2 with one line, nothing written), loads (llama.cpp
generated 2 tokens), or BROKEN (synth exit 0 but the file does not load, or synth crashed, or a
refusal left a file behind). Exit 1 if any case is BROKEN.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHS = ["", "llama", "qwen2moe", "deepseek2", "qwen3moe", "gpt-oss", "glm4moe", "llama4", "kimi-k2", "deepseek3",
         "gemma4", "qwen3next"]
LOAD = ("import sys; from llama_cpp import Llama; m = Llama(sys.argv[1], n_ctx=64, verbose=False); "
        "out = m.create_completion('The press', max_tokens=2, temperature=0); print(repr(out['choices'][0]['text']))")


def case(rng: random.Random) -> list[str]:
    flags = ["--moe", "--size-mb", str(rng.choice([24, 40, 64, 100]))]
    arch = rng.choice(ARCHS)
    if arch:
        flags += ["--arch", arch]
    for flag, values in (("--layers", [1, 2, 3, 4, 5, 8]), ("--experts", [2, 4, 8, 16, 32, 64, 256]),
                         ("--experts-used", [1, 2, 4, 8]), ("--shared-experts", [0, 1, 2]),
                         ("--quant", ["q8_0", "q4_k_m", "mxfp4"]), ("--routing", ["real", "uniform"])):
        if rng.random() < 0.4:
            flags += [flag, str(rng.choice(values))]
    return flags


def streams(path: Path) -> tuple[str, str]:
    """("streams", text) when bench at 60 % of the file gives the unconstrained run's text."""
    budget = max(1, int(path.stat().st_size / 2**20 * 0.6))
    texts = []
    for extra in ([], ["--budget-mb", str(budget)]):
        done = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--model", str(path),
                               "--tokens", "6", *extra], capture_output=True, text=True)
        if done.returncode == 2 and extra:
            return "budget refused", (done.stderr.strip().splitlines() or ["?"])[-1]
        if done.returncode != 0:
            return "BROKEN", f"bench {' '.join(extra)} exit {done.returncode}: " + (
                (done.stderr.strip().splitlines() or ["?"])[-1])
        texts.append(next((line for line in done.stdout.splitlines() if line.startswith("text")), ""))
    if texts[0] != texts[1]:
        return "BROKEN", f"text differs at --budget-mb {budget}: {texts[0][:60]!r} vs {texts[1][:60]!r}"
    return "streams", texts[1][:60]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stream", action="store_true", help="bench each file that loads at 60 %% of its size too")
    args = p.parse_args()
    rng = random.Random(args.seed)
    counts = {"refused": 0, "loads": 0, "BROKEN": 0, "streams": 0, "budget refused": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.cases):
            out = Path(tmp) / f"c{i}.gguf"
            flags = case(rng)
            done = subprocess.run([sys.executable, "-m", "shardscope.engine.cli.cli", "synth", *flags,
                                   "--out", str(out), "--quiet"], capture_output=True, text=True)
            said = (done.stderr + done.stdout).strip()
            if done.returncode == 2 and len(said.splitlines()) == 1 and not out.exists():
                verdict = "refused"
            elif done.returncode != 0:
                verdict = "BROKEN"
            else:
                load = subprocess.run([sys.executable, "-c", LOAD, str(out)], capture_output=True, text=True)
                verdict = "loads" if load.returncode == 0 else "BROKEN"
                said = said if load.returncode == 0 else (load.stderr.strip().splitlines() or ["?"])[-1]
                if verdict == "loads" and args.stream:
                    verdict, said = streams(out)
            counts[verdict] += 1
            if verdict not in ("loads", "streams"):
                print(f"{verdict:8} synth {' '.join(flags)}: {said[:200]}", flush=True)
            out.unlink(missing_ok=True)
    print(counts)
    return 1 if counts["BROKEN"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
