"""Notice another run streaming the same model file, so its figures are not trusted silently.

Eviction works per file, not per process: when two runs map one model, pages one run
evicts the other faults back in, and each run's mincore sees the other's pages as its own
resident weights (two runs at a 200 MB budget each reported 300 MB). Nothing here can
stop that, but it can be seen: every run holds a *shared* flock on its model file for its
lifetime (shared, so runs never block each other), and the kernel lists every lock in
/proc/locks with the holder's pid and the file's device and inode. A run that finds a
lock other than its own, or another process's read lease (engine/stream/file_guard.py:
runs of shardscope that predate this lock still take one), shares its eviction.

``others()`` is cheap (one small read of /proc/locks), so a run can check at its start
and again while it runs: the first of two runs learns of the second one too.
"""

from __future__ import annotations

import os

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

_LOCKS = "/proc/locks"


class ModelLock:
    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None
        self.key: tuple[int, int, int] | None = None
        self.seen: set[str] = set()  # every other holder seen during the run ("pid 123")
        if fcntl is None:
            return
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            fcntl.flock(self.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            st = os.fstat(self.fd)
            self.key = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        except OSError:  # unreadable here: the run itself words that error
            self.release()

    def _holders(self) -> list[tuple[str, int]]:
        """(kind, pid) of every FLOCK and LEASE on the model file, ours included."""
        if self.key is None:
            return []
        try:
            with open(_LOCKS) as handle:
                lines = handle.read().splitlines()
        except OSError:
            return []
        found = []
        for line in lines:
            parts = line.split()
            if parts and parts[1] == "->":  # a waiter, not a holder
                continue
            try:
                kind, pid, where = parts[1], int(parts[4]), parts[5]
                major, minor, inode = where.split(":")
                key = (int(major, 16), int(minor, 16), int(inode))
            except (IndexError, ValueError):
                continue
            if key == self.key and kind in ("FLOCK", "LEASE"):
                found.append((kind, pid))
        return found

    def others(self) -> list[str]:
        """Other runs mapping this model now ("pid 123", or "this process" for a second run in it)."""
        me = os.getpid()
        holders = self._holders()
        names = sorted({f"pid {pid}" for _, pid in holders if pid != me})
        if sum(1 for kind, pid in holders if kind == "FLOCK" and pid == me) > 1:
            names.append("another run in this process")
        self.seen.update(names)
        return names

    def shared_note(self) -> str:
        """'' when the run had the model to itself, else what the row's evict_mechanism gains."""
        if not self.seen:
            return ""
        return (f"SHARED with {', '.join(sorted(self.seen))} mapping this model: "
                f"its pages count here too, figures are not this run's alone")

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)  # closing drops the flock
            except OSError:
                pass
            self.fd = None
