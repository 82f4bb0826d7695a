"""Headless continuous rounds in a child process of their own, for benches that put the window
beside ``shardscope bench``.

Why a child: llama.cpp here is built with OpenMP, and libgomp keeps one thread pool per thread
that ever ran a parallel region. A headless run in the bench's main thread leaves that pool
behind; the window's run then computes on its own thread with a second pool, and with more
managed threads than cores libgomp stops spinning between parallel regions: the window's run
was 35 % slower than the same window in a fresh process (docs/decisions.md, issue 32). The app
never computes on its main thread; a bench must not either.

``rounds_in_child(settings, seconds=..., rounds=..., streams=..., drop_cache=...)`` returns each
round's figures (``ROW``: n_gen, avg_ts, stopped and where a token's time went); ``decode_rate``
turns them into decoded tokens per decode second. ``RoundStream(settings)`` runs until told to
end and keeps each round with the time it ended, for benches that take turns with the window.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import namedtuple

from shardscope.app.base.window_priority import at_normal_priority
from shardscope.engine.knobs.settings import RunSettings

__all__ = ["rounds_in_child", "RoundStream", "loaded_and_paused", "decode_rate", "row_of", "Row", "ROW"]

# A round as a bench compares it: its decode time per token split into waiting for weights
# (the expert loads of an expert run, the shard loads of a layer run) and the rest (compute).
ROW = ("n_gen", "avg_ts", "stopped", "compute_ms_per_token", "wait_ms_per_token", "read_mb_per_token", "ttft_ms",
       "shared")
Row = namedtuple("Row", ROW)
# The child is this module run with -m, from the same working directory as the bench (the repo
# root: bench/README.md), so it imports bench.lib the same way.
CHILD = [sys.executable, "-m", "bench.lib.headless_child"]


def row_of(summary) -> Row:
    wait = getattr(summary, "expert_wait_ms_per_token", None)
    if wait is None:
        wait = summary.wait_ms_per_token
    decode_ms = 1000.0 / summary.avg_ts if summary.avg_ts > 0 else math.nan
    return Row(float(summary.n_gen), float(summary.avg_ts), bool(summary.stopped), decode_ms - wait, float(wait),
               float(summary.read_mb_per_token), float(summary.ttft_ms),
               "SHARED" in summary.evict_mechanism)  # another run mapped the file (model_lock.py)


def decode_rate(rounds, skip_first: bool = True) -> float:
    """Tokens over decode seconds of complete rounds, the load's first round left out when there
    are others (NaN when none). ``rounds``: Rows or RunSummary objects."""
    rows = [(r.n_gen, r.avg_ts, r.stopped) for r in rounds]
    if skip_first:
        rows = rows[1:] or rows
    done = [(n, ts) for n, ts, stopped in rows if not stopped and ts > 0 and n > 0]
    seconds = sum(n / ts for n, ts in done)
    return sum(n for n, _ in done) / seconds if seconds > 0 else float("nan")


def rounds_in_child(settings: RunSettings, *, seconds: float | None = None, rounds: int | None = None,
                    streams: str | None = None, drop_cache: bool = False) -> list[Row]:
    job = {"settings": dataclasses.asdict(settings), "seconds": seconds, "rounds": rounds,
           "streams": streams, "drop_cache": drop_cache}
    out = at_normal_priority(lambda: subprocess.run([*CHILD, json.dumps(job)],
                                                    capture_output=True, text=True))
    if out.returncode != 0:
        raise SystemExit(f"headless child failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return [Row(*r) for r in json.loads(out.stdout.strip().splitlines()[-1])]


class RoundStream:
    """Continuous rounds in a child process until ``end()``, each round kept as it ends with the
    time it ended (``time.perf_counter()``: one clock for all processes on Linux and macOS).

    A bench takes turns with it between rounds: ``pause_at_round_end()`` asks the child to stop
    itself (SIGSTOP) right after its current round, ``on_paused`` is called (from the reader
    thread) once it has, and ``resume()`` lets it go on. A pause between rounds falls in no
    round's decode, so no round is lost to it (a SIGSTOP at a fixed time lands in a decode most of
    the time, and that round is not the run's speed)."""

    def __init__(self, settings: RunSettings) -> None:
        job = {"settings": dataclasses.asdict(settings), "seconds": None, "rounds": None, "streams": None,
               "drop_cache": False, "stream": True}
        self._stderr = tempfile.TemporaryFile("w+")  # a pipe nobody reads while the child runs could fill
        self.process = at_normal_priority(lambda: subprocess.Popen(
            [*CHILD, json.dumps(job)], stdout=subprocess.PIPE, stderr=self._stderr,
            stdin=subprocess.PIPE))
        self.ended: list[tuple[float, Row]] = []  # (perf_counter when the round ended, its figures)
        self.on_paused = lambda: None  # called from the reader thread once the child stopped itself
        self.paused = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            item = json.loads(line.decode())
            if item == PAUSING:  # the child stops itself right after this line: wait until it has
                while _running(self.process.pid):
                    time.sleep(0.0005)
                self.paused.set()
                self.on_paused()
                continue
            t, *row = item
            self.ended.append((t, Row(*row)))

    def pause_at_round_end(self) -> None:
        """Asks the child to stop itself after the round under way (``paused`` is set then).
        Asked on its stdin, not by a signal: a signal would interrupt whatever system call one of
        the run's threads is in."""
        self.paused.clear()
        self.process.stdin.write(b"p")
        self.process.stdin.flush()

    def resume(self) -> None:
        self.paused.clear()
        os.kill(self.process.pid, signal.SIGCONT)

    def take_turn(self, seconds: float, wait_s: float = 120.0) -> tuple[float, bool]:
        """Lets the child go for ``seconds`` and then to its next round end; returns when the turn
        started and whether the child stopped itself between rounds within ``wait_s`` (if not, it
        is still running: the caller decides what a turn that ended in no round end means)."""
        start = time.perf_counter()
        self.resume()
        time.sleep(seconds)
        self.pause_at_round_end()
        return start, self.paused.wait(wait_s)

    @property
    def pid(self) -> int:
        return self.process.pid

    def end(self) -> None:
        """Ends the run (resumed first, if paused) and waits for its last round; again, nothing."""
        if self._stderr.closed:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)
        self._stderr.seek(0)
        errors = self._stderr.read().strip()[-2000:]
        self._stderr.close()
        if self.process.returncode not in (0, -signal.SIGTERM):
            raise SystemExit(f"headless child failed ({self.process.returncode}): {errors}")


def loaded_and_paused(stream: RoundStream, rounds: int = 1) -> RoundStream:
    """``stream`` once ``rounds`` rounds have ended (the first is the load), stopped between two
    rounds for its turns."""
    deadline = time.perf_counter() + 300
    while len(stream.ended) < rounds and stream.process.poll() is None and time.perf_counter() < deadline:
        time.sleep(0.05)
    if len(stream.ended) < rounds:
        stream.end()
        raise SystemExit(f"the headless run did not finish {rounds} rounds within 300 s")
    stream.pause_at_round_end()
    if not stream.paused.wait(300):
        stream.end()
        raise SystemExit("the headless run did not end a round within 300 s")
    return stream


PAUSING = "pausing"  # the child's line before it stops itself between two rounds


def _running(pid: int) -> bool:
    """Whether the process is there and not stopped (psutil: /proc on Linux, sysctl on macOS)."""
    import psutil

    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _child(job: dict) -> None:
    from shardscope.engine.runs.run_factory import open_run

    settings = RunSettings(**job["settings"])
    if job["drop_cache"]:
        from bench.lib.cold_cache import drop_from_cache
        drop_from_cache(settings.model_path)
    kept: list = []
    start = time.perf_counter()
    kwargs = {"streams": job["streams"]} if job["streams"] else {}
    with open_run(settings, **kwargs) as run:
        if job.get("stream"):  # until told to end (SIGTERM), each round a line as it ends
            signal.signal(signal.SIGTERM, lambda *_: run.stop())

        def keep(summary):
            row = row_of(summary)
            if job.get("stream"):
                print(json.dumps([time.perf_counter(), *row]), flush=True)
                if not run.stopping and select.select([sys.stdin], [], [], 0)[0] \
                        and os.read(sys.stdin.fileno(), 1) == b"p":  # (ending: no pause to hang in)
                    print(json.dumps(PAUSING), flush=True)  # between two rounds: no decode is under way
                    os.kill(os.getpid(), signal.SIGSTOP)
                return
            kept.append(row)
            if (job["rounds"] and len(kept) >= job["rounds"]) or \
                    (job["seconds"] and time.perf_counter() - start >= job["seconds"]):
                run.stop()
        try:
            run.run(continuous=True, on_summary=keep)
        except Exception:
            if not run.stopping:  # a stop (SIGTERM, or the rounds wanted) in a prompt pass surfaces
                raise             # as "run stopped in the prompt pass": not a failure, as in the app
    if not job.get("stream"):
        print(json.dumps([list(r) for r in kept]))  # NaN is written as NaN, which json reads back


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
