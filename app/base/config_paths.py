"""Where the window keeps the user's profiles and its own state (geometry, last profile).

The folder is the engine's (engine.base.user_dirs.config_dir), so profiles saved by
``shardscope tune --save-profile`` show up in the window on every platform; one
override (``SHARDSCOPE_CONFIG_DIR``, or a folder passed to the window) moves both.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from shardscope.engine.base.user_dirs import config_dir

APP_NAME = "shardscope"


def default_config_dir() -> Path:
    """The CLI's config folder: $SHARDSCOPE_CONFIG_DIR, else ~/.config/shardscope."""
    return config_dir()


def profiles_dir(config_dir: Path) -> Path:
    return config_dir / "profiles"


def window_settings(config_dir: Path) -> QSettings:
    """An ini file next to the profiles, not the registry/plist: one folder to override."""
    return QSettings(str(config_dir / "window.ini"), QSettings.Format.IniFormat)
