"""Tests keep out of the user's folders, and the layout cache stays bounded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from shardscope.engine.base.user_dirs import cache_dir, config_dir


def _under(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def test_the_suite_never_writes_the_users_cache_or_config():
    """Every folder the engine uses lies under the session's temp root, not under the real home nor
    under any folder platformdirs gave before the redirect (on macOS ~/Library/..., which ignores
    $XDG_*), in this process and in a subprocess (the CLI tests run many). conftest's session end
    also checks that nothing under those real folders changed."""
    import platformdirs

    from conftest import REAL_HOME, REAL_USER_PATHS, TEST_USER_DIRS

    for where in (cache_dir(), config_dir(), platformdirs.user_cache_path("shardscope", appauthor=False),
                  platformdirs.user_config_path("shardscope", appauthor=False)):
        assert _under(where, TEST_USER_DIRS) and not _under(where, REAL_HOME), where
        assert not any(_under(where, real) for real in REAL_USER_PATHS), where
    out = subprocess.run([sys.executable, "-c", "from shardscope.engine.base.user_dirs import cache_dir, config_dir;"
                          "print(cache_dir()); print(config_dir())"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(cache_dir()), str(config_dir())]
    from shardscope.engine.base.bundled_model import bundled_model_path

    bundled = bundled_model_path()  # joined into the session's cache, no link into the developer's
    assert not bundled.is_symlink() and _under(bundled, TEST_USER_DIRS), bundled


def test_layout_cache_is_pruned_to_its_bound(bundled_model, monkeypatch):
    from shardscope.engine.layout import layout_cache

    folder = cache_dir() / "layouts"
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(12):  # entries of models opened long ago
        old = folder / f"old{i:02d}.json"
        old.write_text(json.dumps({"format": 1, "path": f"/gone/{i}.gguf"}))
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    stray = folder / ".abc.json.x1.tmp"  # a write SIGKILLed before its rename
    stray.write_text("{")
    os.utime(stray, (1_000_000, 1_000_000))
    for entry in folder.glob("*.json"):
        if not entry.name.startswith("old"):
            entry.unlink()  # the bundled model's own entry: make load_layout write it anew
    monkeypatch.setattr(layout_cache, "MAX_ENTRIES", 5)

    layout = layout_cache.load_layout(bundled_model)

    left = sorted(p.name for p in folder.iterdir())
    assert len(left) == 5 and not stray.exists(), left
    assert [n for n in left if n.startswith("old")] == [f"old{i:02d}.json" for i in range(8, 12)]  # newest kept
    assert layout_cache.load_layout(bundled_model) == layout  # the fresh entry survived and still reads back
