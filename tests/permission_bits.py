"""Run a check in a child process that obeys permission bits, also when the suite runs as root.

Root writes through ``chmod 0o555`` because it holds CAP_DAC_OVERRIDE (and reads through with
CAP_DAC_READ_SEARCH, changes any mode with CAP_FOWNER). The child drops those three from its
capability bounding set before it executes Python, so the interpreter starts without them and
a read-only folder refuses it as it refuses a user. As a normal user nothing is dropped (there
is nothing to drop); the child then runs as that user.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3


CAP_SETPCAP = 8  # what PR_CAPBSET_DROP needs (capabilities(7))


def _as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def why_permissions_cannot_hold() -> str | None:
    """Why a child of this process would still override permission bits, or None when it obeys them:
    a user obeys them anyway; root does only where it can drop the overrides (Linux, CAP_SETPCAP)."""
    if not _as_root():
        return None
    if not sys.platform.startswith("linux"):
        return f"running as root on {sys.platform}: no capability bounding set to drop the overrides from"
    try:
        with open("/proc/self/status") as f:
            effective = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return "running as root and /proc/self/status has no CapEff line to tell whether CAP_SETPCAP is held"
    if not effective >> CAP_SETPCAP & 1:
        return "running as root without CAP_SETPCAP: CAP_DAC_OVERRIDE cannot be dropped, root writes through 0o555"
    return None


def require_permission_bits(tmp_path) -> None:
    """Skip (with the reason) where a child cannot be made to obey permission bits, else check it does."""
    import pytest

    reason = why_permissions_cannot_hold()
    if reason:
        pytest.skip(reason)
    assert cannot_override_permissions(tmp_path)


def _drop_overrides() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


def run_obeying_permissions(args: list[str], **kw) -> subprocess.CompletedProcess:
    """``python args…`` in a child that cannot override permission bits (see the module doc)."""
    return subprocess.run([sys.executable, *args], preexec_fn=_drop_overrides if _as_root() else None,
                          capture_output=True, text=True, timeout=300, **kw)


def cannot_override_permissions(tmp_path) -> bool:
    """The child really obeys the bits: it cannot create a file in a 0o555 folder (checked, not
    assumed; the probe folder is made under the test's ``tmp_path``)."""
    folder = tmp_path / "permission-probe"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        probe = run_obeying_permissions(["-c", f"open({str(folder / 'x')!r}, 'w')"])
    finally:
        folder.chmod(0o755)
        folder.rmdir()
    return probe.returncode != 0 and "PermissionError" in probe.stderr
