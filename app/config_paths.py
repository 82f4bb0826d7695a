"""Where the window keeps the user's profiles and its own state (geometry, last profile).

Both live under one folder so a single override moves them together: tests and
screenshot sessions set ``SHARDSCOPE_CONFIG_DIR`` (or pass a folder to the window)
and never touch the real user's settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths

CONFIG_DIR_ENV = "SHARDSCOPE_CONFIG_DIR"
APP_NAME = "shardscope"


def default_config_dir() -> Path:
    """``$SHARDSCOPE_CONFIG_DIR`` if set, else the platform's per-user config folder."""
    override = os.environ.get(CONFIG_DIR_ENV)
    if override:
        return Path(override)
    location = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppConfigLocation)
    if not location:  # no QCoreApplication name set, or an exotic platform
        location = str(Path.home() / ".config" / APP_NAME)
    return Path(location)


def profiles_dir(config_dir: Path) -> Path:
    return config_dir / "profiles"


def window_settings(config_dir: Path) -> QSettings:
    """An ini file next to the profiles, not the registry/plist: one folder to override."""
    return QSettings(str(config_dir / "window.ini"), QSettings.Format.IniFormat)
