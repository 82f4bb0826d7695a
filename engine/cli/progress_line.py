"""The CLI's one progress line on stderr for the load and the prompt pass.

Quiet under ``--quiet`` and when stderr is not a terminal (a log file would fill with
carriage returns). It is fed from the run's samples (the sampler's thread): a sample
that carries no progress clears the line, so the summary prints on a clean line.

Written by hand rather than with tqdm: tqdm's own rate and estimate would count its
updates, not bytes, and the figures here come with their own (engine/measure).
"""

from __future__ import annotations

import math
import os
import sys
import threading

from shardscope.engine.measure.phase_progress import Progress
from shardscope.engine.measure.progress_words import progress_parts

BAR = 20


def line_text(p: Progress, width: int) -> str:
    """``prompt  56 % [###########.........] layer 9 of 16 · 62 MB read · …``, cut to ``width``."""
    if math.isfinite(p.fraction):
        filled = int(round(p.fraction * BAR))
        head = f"{p.phase} {p.percent:3.0f} % [{'#' * filled}{'.' * (BAR - filled)}]"
    else:
        head = f"{p.phase}  busy"
    return f"{head} {' · '.join(progress_parts(p))}"[: max(10, width - 1)]


class ProgressLine:
    def __init__(self, quiet: bool = False, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = not quiet and self.stream.isatty()
        self._shown = 0  # characters on the line now
        self._lock = threading.Lock()

    def on_sample(self, sample) -> None:
        self.show(getattr(sample, "progress", None))

    def show(self, p: Progress | None) -> None:
        if not self.enabled:
            return
        with self._lock:
            if p is None:
                self._clear()
                return
            text = line_text(p, self._columns())
            self.stream.write("\r" + text + " " * max(0, self._shown - len(text)))
            self.stream.flush()
            self._shown = len(text)

    def close(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self.stream.flush()
            self._shown = 0

    def _columns(self) -> int:
        """The terminal's width; one that reports none (a bare pty) counts as 100."""
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 100
        except (OSError, AttributeError, ValueError):
            return 100
