"""Run a child process under a memory cap: cgroup v2 ``memory.max`` where this machine's memory
controller is on v2, else cgroup v1 ``memory.limit_in_bytes`` (this VM: v1, writable). Page cache
is charged to the group in both, so plain mmap under the cap is the comparison peers publish."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

MIB = 1024 * 1024


def _v2_parent() -> tuple[Path | None, str]:
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    own = next((line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")), None)
    for root in (Path(m[1]) for m in mounts if m[2] == "cgroup2"):
        group = root / (own or "/").lstrip("/")
        controllers = group / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split() and os.access(group, os.W_OK):
            return group, ""
    return None, "no writable cgroup v2 group with the memory controller"


def _v1_parent() -> tuple[Path | None, str]:
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    for m in mounts:
        if m[2] == "cgroup" and "memory" in m[3].split(","):
            root = Path(m[1])
            if os.access(root, os.W_OK):
                return root, ""
            return None, f"{root} (cgroup v1 memory) is not writable by this user"
    return None, "no cgroup v1 memory hierarchy is mounted"


def capped_group(cap_bytes: int) -> tuple[Path | None, str, str]:
    """(group dir, 'v2'|'v1', why not) — a new group limited to cap_bytes, swap off where settable."""
    from shardscope.engine.base.platform_calls import linux_only

    if linux_only("cgroup"):  # macOS: no cgroups, the plain-mmap comparison is skipped with this line
        return None, "", linux_only("cgroup")
    for version, finder, limit_file, swap_file in (("v2", _v2_parent, "memory.max", "memory.swap.max"),
                                                   ("v1", _v1_parent, "memory.limit_in_bytes",
                                                    "memory.memsw.limit_in_bytes")):
        parent, why = finder()
        if parent is None:
            continue
        group = parent / f"shardscope-cap-{os.getpid()}"
        try:
            group.mkdir(exist_ok=True)
            (group / limit_file).write_text(str(int(cap_bytes)))
            if (group / swap_file).exists():
                try:
                    (group / swap_file).write_text(str(int(cap_bytes)) if version == "v1" else "0")
                except OSError:
                    pass
            return group, version, ""
        except OSError as exc:
            return None, version, f"cannot create a capped cgroup under {parent} ({exc.strerror})"
    return None, "", f"{_v2_parent()[1]}; {_v1_parent()[1]}"


def run_capped(argv: list[str], cap_bytes: int, timeout_s: float) -> tuple[subprocess.CompletedProcess | None, str]:
    """Run argv inside a fresh capped group; (result, '') or (None, why not)."""
    group, version, why = capped_group(cap_bytes)
    if group is None:
        return None, why
    procs = str(group / "cgroup.procs")

    def enter_group() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    try:
        out = subprocess.run(argv, preexec_fn=enter_group, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"the capped child ran past {timeout_s:.0f} s"
    finally:
        try:
            group.rmdir()
        except OSError:
            pass
    return out, version
