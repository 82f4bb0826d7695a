"""Remember each file's layout, keyed by (path, size, mtime), so reopening is instant.

A changed file (new size or mtime) misses the cache and is parsed again, so a stale
plan can never describe a different file. The cache is bounded: past ``MAX_ENTRIES``
files the least recently used ones go (each is a few hundred KB at most; one per model
path ever opened would otherwise grow without end).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from shardscope.engine.base.atomic_write import write_text_atomic
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.layout.gguf_layout import ModelLayout, TensorInfo, read_layout

_FORMAT = 1
MAX_ENTRIES = 64  # models a user keeps switching between; parsing a header again costs well under a second


def _cache_file(path: Path) -> Path:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:16]
    return cache_dir() / "layouts" / f"{digest}.json"


def load_layout(model_path: str | os.PathLike) -> ModelLayout:
    path = Path(model_path)
    try:
        real = path.resolve()
        stat = real.stat()
    except OSError:
        return read_layout(path)  # read_layout words the error
    cached = _cache_file(real)
    try:
        data = json.loads(cached.read_text())
        if (data["format"], data["path"], data["size"], data["mtime_ns"]) == (
            _FORMAT, str(real), stat.st_size, stat.st_mtime_ns
        ) and real.is_file():
            _touch(cached)
            return ModelLayout(
                path=str(real), file_size=data["size"], mtime_ns=data["mtime_ns"],
                version=data["version"], alignment=data["alignment"],
                data_offset=data["data_offset"],
                tensors=tuple(TensorInfo(n, t, tuple(s), o, b) for n, t, s, o, b in data["tensors"]),
                metadata=data["metadata"],
            )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    layout = read_layout(real)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cached, json.dumps({
            "format": _FORMAT, "path": layout.path, "size": layout.file_size,
            "mtime_ns": layout.mtime_ns, "version": layout.version,
            "alignment": layout.alignment, "data_offset": layout.data_offset,
            "metadata": layout.metadata,
            "tensors": [[t.name, t.ggml_type, list(t.shape), t.offset, t.n_bytes] for t in layout.tensors],
        }))
        prune(cached.parent)
    except (OSError, ShardscopeError):
        pass  # a cache we cannot write only costs time
    return layout


def _touch(cached: Path) -> None:
    """Mark an entry as just used (its mtime orders the pruning)."""
    try:
        os.utime(cached)
    except OSError:
        pass


def prune(directory: Path, keep: int | None = None) -> int:
    """Delete all but the ``keep`` most recently used entries (and stray temp files); returns how many went."""
    keep = MAX_ENTRIES if keep is None else keep
    removed = 0
    entries = []
    for entry in directory.iterdir():
        try:
            if entry.suffix == ".tmp":  # a write killed before its rename (a live one is seconds old)
                if time.time() - entry.stat().st_mtime > 600:
                    entry.unlink()
                removed += 1
            elif entry.suffix == ".json":
                entries.append((entry.stat().st_mtime_ns, entry))
        except OSError:
            continue
    entries.sort(reverse=True)
    for _, entry in entries[keep:]:
        try:
            entry.unlink()
            removed += 1
        except OSError:
            pass
    return removed
