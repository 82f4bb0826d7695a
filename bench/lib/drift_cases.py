"""The two cases issue 32's session benches run (bench/goals/gui_session_drift.py, bench/goals/window_cost.py,
bench/studies/run_age.py): a dense model and an MoE file, each below its size in budget; their settings
declared once so the benches compare the same runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import check_run

__all__ = ["moe_model", "dense_settings", "moe_settings", "checked", "file_copies", "no_room_for_copies"]


def moe_model(size_mb: int) -> str:
    """A qwen3moe synth at Q4_K_M (the class the issue reported on), written once into the cache."""
    path = cache_dir() / "bench" / f"drift-qwen3moe-q4km-{size_mb}mb.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(Path(sys.executable).with_name("shardscope")), "synth", "--moe", "--arch", "qwen3moe",
                        "--quant", "q4_k_m", "--size-mb", str(size_mb), "--out", str(path)], check=True)
    return str(path)


def dense_settings(model: str, budget_mb: int | None, threads: int) -> RunSettings:
    """The dense case: 8 MiB shards, depth 1, 32-token rounds; 215 MiB unless given (the bundled
    gemma's minimum is 202 MiB, globals 175)."""
    return RunSettings(model_path=model, budget_mb=budget_mb or 215, shard_mb=8, prefetch_depth=1,
                       threads=threads, n_gen=32, n_ctx=256)


def checked(settings: RunSettings, what: str) -> RunSettings:
    """``settings`` if a run would take them, else one line naming ``what`` and exit 2 (before any
    minute is spent)."""
    try:
        check_run(settings)
    except ShardscopeError as exc:
        print(f"{what}: {exc}", file=sys.stderr)
        sys.exit(2)
    return settings


def moe_settings(model: str, budget_share: float, threads: int) -> RunSettings:
    """The MoE case: a budget of ``budget_share`` of the file, expert cache auto, 32-token rounds."""
    size_mb = os.path.getsize(model) / MIB
    return RunSettings(model_path=model, budget_mb=int(size_mb * budget_share), expert_cache_mb=0,
                       threads=threads, n_gen=32, n_ctx=256)


@contextlib.contextmanager
def file_copies(model: str, names: tuple[str, ...]):
    """A copy of ``model`` for each of ``names`` (its own folder, the file's name kept), written one
    after the other into the cache and removed afterwards; yields their paths. Two runs on one file
    share its eviction (engine/stream/model_lock.py): pages one evicts the other faults back in,
    each one's mincore counts the other's pages as its own, and both runs' rows say "SHARED"; a
    copy is an inode with a page cache of its own. Runs compared read copies written together, not
    one of them the original: on this host-cached disk (and a VM whose DAMON pages out cache left
    cold for a minute) a file's recent history can change its speed — one minute of stop 48 read a
    new copy at 713-1100 MB/s against the original's 613-806 — though bench/studies/run_age.py found no
    steady effect (new ÷ old file 0.97-1.06, the original the fastest twice: docs/decisions.md,
    stop 49). Copies of one age take the question away."""
    folder = Path(tempfile.mkdtemp(prefix="drift-copies-", dir=cache_dir() / "bench"))
    try:
        copies = []
        for name in names:
            (folder / name).mkdir()
            copies.append(folder / name / Path(model).name)
            shutil.copyfile(model, copies[-1])
        yield tuple(str(c) for c in copies)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def no_room_for_copies(size_bytes: int, n: int) -> str | None:
    """None if the cache has room for ``n`` copies of a ``size_bytes`` model (and 512 MiB to
    spare), else the line that says it has not — checked before any run loads."""
    folder = cache_dir() / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    need, free = n * size_bytes / MIB, shutil.disk_usage(folder).free / MIB
    if free < need + 512:
        return f"{folder}: {need:.0f} MiB (and 512 to spare) needed for {n} copies of the model, {free:.0f} free"
    return None
