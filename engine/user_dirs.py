"""Per-user cache directory (no Qt here: the GUI uses QStandardPaths for config)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def cache_dir() -> Path:
    """Where derived data (the assembled model, layout caches) lives; created on demand."""
    override = os.environ.get("SHARDSCOPE_CACHE_DIR")
    if override:
        base = Path(override)
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches" / "shardscope"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shardscope"
    base.mkdir(parents=True, exist_ok=True)
    return base
