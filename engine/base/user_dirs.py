"""Per-user folders: the cache, and the one config folder the CLI and the window share.

Where they are is ``platformdirs``' answer for this system (Linux: ``$XDG_CACHE_HOME`` /
``$XDG_CONFIG_HOME``, else ~/.cache and ~/.config; macOS: ~/Library/Caches and
~/Library/Application Support), under ``$SHARDSCOPE_CACHE_DIR`` / ``$SHARDSCOPE_CONFIG_DIR``
when those are set. No path is written by hand here.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "shardscope"


def cache_dir() -> Path:
    """Where derived data (the assembled model, layout caches) lives; created on demand."""
    override = os.environ.get("SHARDSCOPE_CACHE_DIR")
    base = Path(override) if override else platformdirs.user_cache_path(APP, appauthor=False)
    base.mkdir(parents=True, exist_ok=True)
    return base


def config_dir() -> Path:
    """The user's settings folder: $SHARDSCOPE_CONFIG_DIR, else platformdirs' user config folder
    (~/.config/shardscope on Linux, $XDG_CONFIG_HOME replacing ~/.config), the same rule as the
    user profiles. Not created here."""
    override = os.environ.get("SHARDSCOPE_CONFIG_DIR")
    if override:
        return Path(override)
    return platformdirs.user_config_path(APP, appauthor=False)


def profiles_dir() -> Path:
    """User profiles: <config>/profiles, where ``tune --save-profile`` writes and the window lists."""
    return config_dir() / "profiles"
