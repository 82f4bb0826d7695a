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


def _drop_overrides() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


def run_obeying_permissions(args: list[str], **kw) -> subprocess.CompletedProcess:
    """``python args…`` in a child that cannot override permission bits (see the module doc)."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    return subprocess.run([sys.executable, *args], preexec_fn=_drop_overrides if as_root else None,
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
