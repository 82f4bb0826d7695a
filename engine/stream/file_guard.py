"""Keep the model file from changing under the mapping — or notice in time.

A mapped file that shrinks turns every access past the new end into SIGBUS, which
would kill the whole app (GUI included) from inside llama.cpp's compute threads.
On Linux we hold a *read lease* on the file: any process that opens it for writing
or truncates it is held back by the kernel (up to ``lease-break-time``, 45 s by
default) and we see the break. The run then stops at the next layer, llama.cpp
unmaps the model, and only then is the lease released and the writer let through.
Deletion is harmless to a mapping (the inode lives on) but is reported too.
Where leases are not available (macOS, files owned by someone else), ``mechanism``
says the guard only polls the file's size, which cannot prevent a SIGBUS.
"""

from __future__ import annotations

import os

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class ModelFileGuard:
    def __init__(self, path: str, fd: int, expected_size: int):
        self.path = path
        self.fd = fd
        self.expected_size = expected_size
        self.leased = False
        self.mechanism = "size polling (no lease: cannot prevent SIGBUS on truncation)"
        if fcntl is not None and hasattr(fcntl, "F_SETLEASE"):
            try:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
                # No signal on break (SIGIO would terminate us): we poll F_GETLEASE.
                fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
                self.leased = True
                self.mechanism = "read lease (writers and truncation are held back)"
            except OSError as exc:
                self.mechanism = f"size polling (lease refused: {exc.strerror})"

    def problem(self) -> str | None:
        """A one-line reason to stop, or None while the file is as it was."""
        if self.leased and fcntl.fcntl(self.fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK:
            return (f"{self.path}: another process is writing to or truncating the model file; "
                    f"run stopped before it could change under the mapping")
        try:
            stat = os.fstat(self.fd)
        except OSError as exc:
            return f"{self.path}: model file is no longer readable ({exc.strerror})"
        if stat.st_size != self.expected_size:
            return f"{self.path}: model file changed size ({self.expected_size} → {stat.st_size} bytes)"
        if stat.st_nlink == 0:
            return f"{self.path}: model file was deleted during the run"
        return None

    def release(self) -> None:
        if self.leased:
            try:
                fcntl.fcntl(self.fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            except OSError:
                pass
            self.leased = False
