"""Every file a run will write, checked before the model loads: a run must never be lost
because an output path, a CSV's columns or a device name was found wrong only at the end.

What is checked: the folder exists and takes a new file (a real probe, so a read-only
file system or a /proc path is caught even for root, whom permission bits do not stop);
the path is not a folder; no two outputs, and no output and the model, are the same file;
an existing run CSV has the columns this run's row will have (an MoE run's rows carry the
expert columns, a dense run's do not); the --device id is known.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError


def _flag_names(csv_path, timeline_path, trace_path) -> list[tuple[str, str]]:
    given = [("--csv", csv_path), ("--timeline", timeline_path), ("--trace", trace_path)]
    return [(flag, str(path)) for flag, path in given if path]


def missing_folder(folder: Path) -> str:
    """Why ``folder`` (not a folder) cannot hold a file: a regular file on its path (issue 48: an
    export under a file said "folder … does not exist"), or a folder that does not exist."""
    for part in (folder, *folder.parents):
        if part.exists():
            if not part.is_dir():
                return f"{part} is a file, not a folder" + ("" if part == folder else f" (in the path {folder})")
            break
    return f"folder {folder} does not exist"


def check_writable(flag: str, path: str) -> Path:
    """Refuse (one line naming the flag and path) a path a run could not write at its end."""
    target = Path(path)
    if target.is_dir():
        raise ShardscopeError(f"{flag} {path}: is a folder, not a file")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise ShardscopeError(f"{flag} {path}: {missing_folder(folder)}")
    try:  # what the atomic write at the end will do: a temp file in that folder
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.probe.", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ShardscopeError(f"{flag} {path}: cannot write in {folder} ({exc.strerror or exc})") from None
    return target


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_csv_header(path: str, columns: list[str], what: str = "this run") -> None:
    """An existing, non-empty CSV must have exactly ``columns`` (rows are never silently mixed)."""
    from shardscope.engine.output.csv_out import read_rows

    target = Path(path)
    if not (target.exists() and target.stat().st_size > 0):
        return
    header, _ = read_rows(target)
    if header == list(columns):
        return
    extra = [c for c in columns if c not in header]
    missing = [c for c in header if c not in columns]
    if extra:
        detail = f"{what}'s rows add {', '.join(extra[:3])}{'…' if len(extra) > 3 else ''}"
    elif missing:
        detail = f"{what}'s rows lack {', '.join(missing[:3])}{'…' if len(missing) > 3 else ''}"
    else:
        detail = "its columns are in another order"
    raise ShardscopeError(f"--csv {path}: has other columns than {what} writes ({detail}); write to a new file")


def check_outputs(settings, *, csv_path: str | None = None, timeline_path: str | None = None,
                  trace_path: str | None = None, device: str | None = None) -> None:
    """All of the module doc's checks; raises ShardscopeError with one line, touching nothing."""
    from shardscope.engine.base.bundled_model import resolve_model_path
    from shardscope.engine.runs.run_factory import row_columns

    outputs = [(flag, check_writable(flag, path)) for flag, path in _flag_names(csv_path, timeline_path, trace_path)]
    for i, (flag_a, a) in enumerate(outputs):
        for flag_b, b in outputs[i + 1:]:
            if _same_file(a, b):
                raise ShardscopeError(f"{flag_a} and {flag_b} name the same file {a}; give each its own")
    model = Path(resolve_model_path(settings.model_path))
    for flag, path in outputs:
        if _same_file(path, model):
            raise ShardscopeError(f"{flag} {path}: is the model file; writing there would destroy it")
    if device:
        from shardscope.engine.devices.devices import get_device

        get_device(device)
    if csv_path:
        columns, kind = row_columns(settings, trace_path)
        check_csv_header(csv_path, columns, kind)
