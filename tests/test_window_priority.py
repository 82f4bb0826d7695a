"""The window gives way to its runs (app/base/window_priority.py): the GUI thread is lowered, the run
process it starts is not. Read from the kernel (/proc), in a process of its own: the test's own
process is never lowered."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a nice value is a thread's on Linux only")

CHILD = r"""
import json, os, subprocess, sys, threading
from shardscope.app.base.window_priority import WINDOW_NICE, give_way_to_runs
from shardscope.app.runs.run_worker import run_host_command, spawn_run_host

def nice(path):  # field 19 of /proc/.../stat, after the command's closing parenthesis
    return int(open(path).read().rpartition(")")[2].split()[16])

tid = threading.get_native_id()
before = nice(f"/proc/self/task/{tid}/stat")
said = give_way_to_runs()
again = give_way_to_runs()  # once per process, not once per call
host, conn = spawn_run_host(run_host_command())  # the window's run process
plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # started from the lowered thread
out = {"before": before, "said": said, "again": again, "gui": nice(f"/proc/self/task/{tid}/stat"),
       "run": nice(f"/proc/{host.pid}/stat"), "plain": nice(f"/proc/{plain.pid}/stat"), "step": WINDOW_NICE}
conn.close()  # the run process ends when its window goes
plain.kill()
host.wait(30), plain.wait(30)
print(json.dumps(out))
"""


def test_the_gui_thread_is_lowered_and_the_run_process_it_starts_is_not():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)  # hang bound
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    lowered = min(19, got["before"] + got["step"])
    assert got["gui"] == got["said"] == got["again"] == lowered > got["before"]
    assert got["run"] == got["before"], "the run process must keep the priority the window started with"
    # What the launcher is for: a process started straight from the lowered thread inherits it.
    assert got["plain"] == lowered
