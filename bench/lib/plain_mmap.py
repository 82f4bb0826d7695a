"""llama.cpp alone (plain mmap, no controller) in a child process under a memory cap: the
comparison peers publish. One runner for every bench that prints it (moe_streaming, moe_scale).

    python -m bench.lib.plain_mmap MODEL TOKENS THREADS   # the child: one JSON line
"""

from __future__ import annotations

import json
import sys

from bench.lib.cold_cache import drop_from_cache
from bench.lib.memory_cap import run_capped

MIB = 1024 * 1024
PROMPT = "The history of the printing press begins"


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))


def _child(model: str, tokens: int, threads: int) -> None:
    from shardscope.engine.stream.llama_session import LlamaSession

    marks = {"start": _read_bytes()}

    def on_token(index, *_):
        if index == 0:  # decoded tokens only: the prompt pass reads for several tokens at once
            marks["first"] = _read_bytes()

    with LlamaSession(model, n_threads=threads, n_ctx=128) as session:
        result = session.generate(PROMPT, tokens, on_token=on_token)
        end = _read_bytes()
    n = len(result.token_s)
    read = end - marks.get("first", marks["start"])
    print(json.dumps({"tok_s": n / sum(result.token_s) if n else 0.0,
                      "read_mb_per_token": read / MIB / max(n, 1)}))


def plain_mmap_capped(model: str, cap_mb: float, tokens: int, threads: int) -> tuple[dict | None, str]:
    """({"tok_s", "read_mb_per_token"}, how it was capped) or (None, why not), from a cold cache."""
    drop_from_cache(model)
    child = [sys.executable, "-m", "bench.lib.plain_mmap", model, str(tokens), str(threads)]  # from the repo root
    out, how = run_capped(child, int(cap_mb * MIB), 3600)
    if out is None:
        return None, how
    if out.returncode != 0:
        return None, f"the capped child failed (exit {out.returncode}: {out.stderr.strip()[-300:]})"
    return json.loads(out.stdout.strip().splitlines()[-1]), how


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
