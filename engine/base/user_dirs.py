"""Per-user folders: the cache, and the one config folder the CLI and the window share."""

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


def config_dir() -> Path:
    """The user's settings folder: $SHARDSCOPE_CONFIG_DIR, else ~/.config/shardscope
    ($XDG_CONFIG_HOME replaces ~/.config), the same rule as the user profiles. Not created here."""
    override = os.environ.get("SHARDSCOPE_CONFIG_DIR")
    if override:
        return Path(override)
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "shardscope"


def profiles_dir() -> Path:
    """User profiles: <config>/profiles, where ``tune --save-profile`` writes and the window lists."""
    return config_dir() / "profiles"
