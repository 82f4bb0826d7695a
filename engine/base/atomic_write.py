"""Write-then-rename, so a crash, a full disk or a bad value never leaves half a file.

Profiles, CSVs and timelines all go through here: the old file stays whole until the
new one is complete on disk.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise ShardscopeError(f"{target}: cannot write here ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes 0600 files; give the result the mode a plain open() would have.
        try:
            if target.exists():
                os.chmod(tmp, target.stat().st_mode & 0o777)
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
        except OSError:
            pass
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ShardscopeError(f"{target}: could not be written ({exc.strerror or exc})") from None
