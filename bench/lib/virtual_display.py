"""A display server for GUI benches: an existing $DISPLAY, else our own Xvfb, else offscreen.

Offscreen rendering skips the window system entirely (no X protocol, no compositor
round trips), so a figure measured there flatters the GUI; benches say which one ran.
Must be called before PySide6 is imported: Qt picks its platform once.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import time
from pathlib import Path


def start_display(first: int = 90, last: int = 99) -> str:
    """Set DISPLAY / QT_QPA_PLATFORM for this process; returns a line saying what runs."""
    if os.environ.get("DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "xcb")
        return f"display {os.environ['DISPLAY']} (existing X server, xcb)"
    xvfb = shutil.which("Xvfb")
    if xvfb:
        for n in range(first, last + 1):
            if Path(f"/tmp/.X11-unix/X{n}").exists() or Path(f"/tmp/.X{n}-lock").exists():
                continue
            # A session of its own: Ctrl-C in the terminal reaches the bench, which ends its window
            # cleanly, and not the X server under it (that printed "The X11 connection broke").
            proc = subprocess.Popen([xvfb, f":{n}", "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            atexit.register(_stop, proc)
            for _ in range(100):  # up to 5 s for the socket
                if Path(f"/tmp/.X11-unix/X{n}").exists():
                    os.environ["DISPLAY"] = f":{n}"
                    os.environ["QT_QPA_PLATFORM"] = "xcb"
                    return f"display :{n} (Xvfb started by this bench, xcb)"
                if proc.poll() is not None:
                    break
                time.sleep(0.05)
            _stop(proc)
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    return "display offscreen (no Xvfb found: no display server, figures flatter the GUI)"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
