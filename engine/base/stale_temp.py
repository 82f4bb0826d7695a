"""Temp files that name their writer, so a writer killed outright (SIGKILL, power loss) leaves
nothing the next start cannot clean up.

A write-then-rename leaves ``.<name>.<pid>.<random>.tmp`` behind when its process dies before
the rename; no ``finally`` runs on SIGKILL. The next writer of the same file removes such
files whose process is gone (a live writer's file is left alone: two runs may write side by side).
"""

from __future__ import annotations

import os
from pathlib import Path


def temp_prefix(target: Path) -> str:
    """The mkstemp prefix for a temp file of ``target`` written by this process."""
    return f".{target.name}.{os.getpid()}."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale_temps(target: Path) -> list[Path]:
    """Delete the temp files of ``target`` left by writers that no longer run; returns them."""
    directory = target.parent if str(target.parent) else Path(".")
    removed = []
    try:
        candidates = list(directory.glob(f".{target.name}.*.tmp"))
    except OSError:
        return removed
    for tmp in candidates:
        rest = tmp.name[len(target.name) + 2:]  # "<pid>.<random>.tmp"
        pid_text = rest.split(".", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        try:
            tmp.unlink()
            removed.append(tmp)
        except OSError:
            pass
    return removed
