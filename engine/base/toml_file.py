"""Read one small TOML file (a profile, a device) into a dict, or say clearly why not.

Profiles are hand-edited: every way a file can be wrong — missing, a folder, too big,
not UTF-8, not TOML, nested absurdly deep — becomes one ShardscopeError line that
names the file, so the key-level checks that follow only ever see a parsed table.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from shardscope.engine.base.errors import ShardscopeError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_FILE_BYTES = 1 << 20


def read_toml(path: str | Path, kind: str) -> dict[str, Any]:
    """``kind`` ("profile", "device file") words the messages."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ShardscopeError(f"{source}: no such {kind}") from None
    except IsADirectoryError:
        raise ShardscopeError(f"{source}: is a directory, not a {kind}") from None
    except OSError as exc:
        raise ShardscopeError(f"{source}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ShardscopeError(f"{source}: too large to be a {kind} (over {MAX_FILE_BYTES // 1024} KiB)")
    try:
        text = raw.decode("utf-8-sig")  # tolerate the BOM some Windows editors add
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ShardscopeError(
            f"{source}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); save it as UTF-8"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message already carries "(at line L, column C)".
        raise ShardscopeError(f"{source}: not valid TOML: {' '.join(str(exc).split())}") from None
    except (RecursionError, ValueError, MemoryError) as exc:  # e.g. arrays nested thousands deep
        raise ShardscopeError(f"{source}: not valid TOML ({type(exc).__name__})") from None
