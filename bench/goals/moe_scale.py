"""A MoE larger than this machine's RAM, streamed under a 2,048 MB budget with 2 threads.

Writes once (and keeps, in the user cache dir) a synthetic 64-expert top-8 MoE of at least
1.15 × MemTotal, then prints side by side in one run, each run from a cold page cache:

- tok/s, computing vs waiting ms per token and overlap = computing ÷ (computing + waiting);
- bytes read before the first token vs the file size (and vs dense + the prompt's experts);
- kernel CPU seconds per GB read (getrusage: system time of this process);
- peak resident weights read by another process (Rss of every VMA in the model's address range
  from /proc/<pid>/smaps, 1 Hz, the run frozen with SIGSTOP for the ~30 ms of each read so
  the walk is a snapshot) vs the budget;
- llama.cpp plain mmap under the same memory cap (cgroup v2 memory.max, else v1
  memory.limit_in_bytes: bench/lib/memory_cap.py): its tok/s, GB per token, and the ratio.

Usage: .venv/bin/python -m bench.goals.moe_scale [--tokens 16] [--runs lru:off,hot:on] [--plain-tokens 3]
The model write takes a few minutes and ~30 GB of disk; later runs reuse it.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.lib.cold_cache import drop_from_cache
from bench.lib.plain_mmap import plain_mmap_capped
from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.gguf_layout import read_layout
from shardscope.engine.layout.moe_layout import read_moe_layout
from shardscope.engine.runs.run_factory import open_run

MIB = 1024 * 1024
GB = 1e9
PROMPT = "The history of the printing press begins"
WATCHER = r"""
import os, signal, sys, time
pid, lo, hi = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def all_stopped():
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in "tT":
                    return False
        except OSError:
            pass
    return True

while True:
    # The run is frozen while its smaps are read: the walk takes ~30 ms and experts come and go
    # at GB/s, so an unfrozen read counts a unit leaving and its replacement both.
    try:
        os.kill(pid, signal.SIGSTOP)
        while not all_stopped():
            time.sleep(0.0005)
        with open(f"/proc/{pid}/smaps") as f:
            text = f.read()
    except OSError:
        break
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    total, inside = 0, False
    for line in text.splitlines():
        first = line.split(None, 1)[0] if line else ""
        if "-" in first and not first.endswith(":"):
            a, b = (int(x, 16) for x in first.split("-"))
            inside = lo <= a and b <= hi
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    print(total, flush=True)
    time.sleep(1.0)
"""


def mem_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal")


def scale_model(skew: float | None) -> str:
    """The MoE (or, with skew None, a dense llama) of ≥ 1.15 × RAM, written once into the cache dir."""
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    # synth lands within ±5 % of the size asked for (whole layers): ask for 1.21 × RAM to get ≥ 1.15 ×.
    size_mb = math.ceil(1.21 * mem_total_bytes() / MIB)
    name = (f"dense-scale-{size_mb}mb.gguf" if skew is None
            else f"moe-scale-64x8-{size_mb}mb-skew{skew:g}-routing-v2.gguf")
    path = cache_dir() / "bench" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"writing {path} ({size_mb} MiB, once) …", flush=True)
        moe = None if skew is None else MoeSpec(64, 8, routing_skew=skew)
        write_synthetic_model(path, size_mb, moe=moe, seed=11)
    if os.path.getsize(path) < 1.15 * mem_total_bytes():
        raise SystemExit(f"moe_scale: {path} is smaller than 1.15 × RAM; delete it and run again")
    return str(path)


class OutsideWatch:
    """Another process samples this one's Rss inside the model's address range (1 Hz, frozen while read)."""

    def __init__(self, lo: int, hi: int):
        self.proc = subprocess.Popen([sys.executable, "-c", WATCHER, str(os.getpid()), str(lo), str(hi)],
                                     stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
        self.samples: list[int] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.samples.append(int(line.split()[0]))

    def stop(self) -> list[int]:
        self.proc.kill()
        self.proc.wait()
        self._thread.join(timeout=2)
        return self.samples


def disk_for_expert_reads(model: str, moe, seconds: float = 8.0, lanes: int = 16) -> float:
    """10^6 B/s: this disk now, for the runs' exact pattern — random whole experts' slices read with
    O_DIRECT by 16 lanes into reused buffers (no page cache, no allocation): the bound a run
    that waits for every miss cannot beat."""
    import mmap as _mmap
    import random
    from concurrent.futures import ThreadPoolExecutor

    from shardscope.engine.base.memory_calls import page_outward

    fd = os.open(model, os.O_RDONLY | os.O_DIRECT)
    rng = random.Random(7)
    units = [(layer, e) for layer in moe.layers for e in range(moe.n_expert)]
    stop = time.perf_counter() + seconds

    def lane(seed: int) -> int:
        r = random.Random(seed)
        buf = _mmap.mmap(-1, 16 * MIB)
        done = 0
        while time.perf_counter() < stop:
            for start, end in moe.unit_ranges(*r.choice(units)):
                lo, hi = page_outward(start, end)
                done += os.preadv(fd, [memoryview(buf)[:hi - lo]], lo)
        buf.close()
        return done

    drop_from_cache(model)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(lanes) as pool:
        total = sum(pool.map(lane, [rng.random() for _ in range(lanes)]))
    os.close(fd)
    return total / (time.perf_counter() - t0) / 1e6


def read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def stime() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def streamed_run(model: str, budget_mb: float, tokens: int, threads: int, policy: str, speculation: bool) -> dict:
    """One cold run of the MoE (policy = expert policy) or the dense model (policy pinned|lru)."""
    drop_from_cache(model)
    dense = policy in ("pinned", "lru") and speculation is None
    knobs = dict(policy=policy, shard_mb=64, prefetch_depth=2) if dense else \
        dict(expert_policy=policy, expert_speculation=speculation)
    settings = RunSettings(model_path=model, budget_mb=budget_mb, n_gen=tokens, n_ctx=128, threads=threads,
                           prompt=PROMPT, **knobs)
    marks: dict = {"read0": read_bytes(), "cpu0": stime()}

    def on_phase(name: str) -> None:
        if name == "generating" and "first" not in marks:
            marks["first"] = read_bytes() - marks["read0"]

    run = open_run(settings)
    run.on_phase = on_phase
    watch = None
    try:
        run.load()
        note = getattr(run, "io_note", "") or run.session.load_note
        watch = OutsideWatch(run.mapping.start, run.mapping.end)
        summary = run.run()
        if dense:  # the prompt pass reads every layer once: the whole model is what it needs
            needed = os.path.getsize(model)
        else:
            needed = run.moe.dense_bytes + sum(run.moe.unit_bytes(layer) for layer, _ in
                                               {(r.layer, e) for r in run.streamer.records if r.prompt
                                                for e in r.experts})
    finally:
        samples = watch.stop() if watch else []
        run.close()
    total_read = read_bytes() - marks["read0"]
    cpu = stime() - marks["cpu0"]
    return {"summary": summary, "first_bytes": marks.get("first", 0), "cpu_s_per_gb": cpu / (total_read / GB),
            "peak_outside": max(samples) if samples else 0, "n_samples": len(samples),
            "needed_bytes": needed, "note": note, "mechanism": summary.load_mechanism}


def report(label: str, r: dict, size: int, budget_mb: float, seconds: float) -> None:
    s = r["summary"]
    wait = getattr(s, "expert_wait_ms_per_token", s.wait_ms_per_token)
    comp = getattr(s, "compute_ms_per_token", 1000 / s.avg_ts - wait if s.avg_ts else 0.0)
    hit = getattr(s, "expert_hit_rate", s.cache_hit_rate)
    print(f"{label:8s} {s.avg_ts:.3f} tok/s  computing {comp:.0f} / waiting {wait:.0f} ms per token "
          f"(overlap {comp / max(comp + wait, 1e-9):.2f})  hit {100 * hit:.1f} %  "
          f"read {s.read_mb_per_token:.0f} MiB/token  ttft {s.ttft_ms / 1000:.1f} s  [{seconds:.0f} s]", flush=True)
    print(f"         before first token {r['first_bytes'] / GB:.2f} GB read of the {size / GB:.1f} GB file "
          f"(what the prompt needs {r['needed_bytes'] / GB:.2f} GB: ratio "
          f"{r['first_bytes'] / max(1, r['needed_bytes']):.2f}); kernel CPU {r['cpu_s_per_gb']:.3f} s/GB; "
          f"peak resident weights (smaps, another process, {r['n_samples']} samples) "
          f"{r['peak_outside'] / MIB:.0f} MiB vs budget {budget_mb:.0f}", flush=True)
    if r["note"]:
        print(f"         note: {r['note']}")
    print(f"         I/O: {r['mechanism']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-mb", type=float, default=2048)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--routing-skew", type=float, default=1.0)
    parser.add_argument("--runs", default="lru:off,hot:on", help="policy:speculation pairs")
    parser.add_argument("--plain-tokens", type=int, default=3, help="0 skips plain mmap (minutes per token)")
    parser.add_argument("--cap-mb", type=float, default=2560, help="plain mmap's memory cap")
    parser.add_argument("--dense-tokens", type=int, default=3, help="the dense > RAM row's tokens (0 skips it)")
    args = parser.parse_args()

    model = scale_model(args.routing_skew)
    size = os.path.getsize(model)
    moe = read_moe_layout(read_layout(model))
    print(f"model   {Path(model).name}: {size / GB:.1f} GB ({size / mem_total_bytes():.2f} × RAM), "
          f"{len(moe.layers)} layers, {moe.n_expert} experts top-{moe.n_expert_used}, "
          f"dense {moe.dense_bytes / MIB:.0f} MiB; budget {args.budget_mb:.0f} MiB, {args.threads} threads, "
          f"{args.tokens} tokens, cold cache before each run", flush=True)
    results = {}
    for pair in [p for p in args.runs.split(",") if p]:
        policy, spec = pair.split(":")
        t0 = time.perf_counter()
        disk = disk_for_expert_reads(model, moe)  # the same minute as the run
        results[pair] = r = streamed_run(model, args.budget_mb, args.tokens, args.threads, policy, spec == "on")
        report(pair, r, size, args.budget_mb, time.perf_counter() - t0)
        s = r["summary"]
        bound = disk / (s.read_mb_per_token * MIB / 1e6) if s.read_mb_per_token else float("inf")
        print(f"         disk for this pattern just before: {disk:.0f} MB/s (16 lanes of O_DIRECT expert "
              f"reads) → at {s.read_mb_per_token:.0f} MiB/token at most {bound:.3f} tok/s; the run got "
              f"{s.avg_ts / bound:.2f} of it", flush=True)
    if args.dense_tokens:
        dense_model = scale_model(None)
        t0 = time.perf_counter()
        r = streamed_run(dense_model, args.budget_mb, args.dense_tokens, args.threads, "pinned", None)
        print(f"dense   {Path(dense_model).name}: {os.path.getsize(dense_model) / GB:.1f} GB, 64 MiB shards, "
              f"prefetch depth 2")
        report("pinned", r, os.path.getsize(dense_model), args.budget_mb, time.perf_counter() - t0)
    if not results:
        return
    best = max(results.values(), key=lambda r: r["summary"].avg_ts)
    if args.plain_tokens:
        plain, how = plain_mmap_capped(model, args.cap_mb, args.plain_tokens, args.threads)
        if plain:
            print(f"plain mmap, capped at {args.cap_mb:.0f} MiB (cgroup {how}): {plain['tok_s']:.4f} tok/s, "
                  f"{plain['read_mb_per_token'] * MIB / GB:.1f} GB read per token", flush=True)
            print(f"ratio to plain mmap under the same cap {best['summary'].avg_ts / plain['tok_s']:.1f}x")
        else:
            print(f"plain mmap: not run ({how})")
    s = best["summary"]
    comp, wait = s.compute_ms_per_token, s.expert_wait_ms_per_token
    print(f"best: {s.expert_policy}{' + speculation' if s.expert_speculation else ''} {s.avg_ts:.3f} tok/s, "
          f"overlap {comp / (comp + wait):.2f}, kernel CPU {best['cpu_s_per_gb']:.3f} s/GB, "
          f"first token after {best['first_bytes'] / GB:.2f} GB, peak weights {best['peak_outside'] / MIB:.0f} MiB "
          f"/ {args.budget_mb:.0f}")


if __name__ == "__main__":
    from shardscope.engine.base.errors import ShardscopeError

    try:
        main()
    except ShardscopeError as exc:
        sys.exit(f"moe_scale: {exc}")
