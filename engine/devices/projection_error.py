"""The error bar on a projection: how far off bench/sweeps/phone_check.py measured it on published phone runs.

The phone check projects BigMoeOnEdge's published OnePlus 15R runs (other than the runs compute is
calibrated from) and writes the spread of its errors to one file, ``profiles/devices/projection-error.json``;
`size` and the window print it beside the answer ("published runs: -12 % to +8 %"), so a reader of a
projection sees how well the same arithmetic did where the answer was known. Nothing else writes it.

    {"written_by": "bench/sweeps/phone_check.py", "device": "oneplus-15r", "date": "2026-12-04",
     "runs": 17, "source": "tests/data/published-phone-runs.csv",
     "figures": {"serial_tok_s": [-0.12, 0.08], "overlapped_tok_s": [...], "flash_s": [...], "mib_per_token": [...],
                 "engine_tok_s": [...], "leave_one_model_out_tok_s": [...]}}

Each pair is (lowest, highest) of projected / published - 1 over those runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

ERROR_FILE = Path(__file__).resolve().parents[2] / "profiles" / "devices" / "projection-error.json"
FIGURES = ("serial_tok_s", "overlapped_tok_s", "engine_tok_s", "flash_s", "mib_per_token", "leave_one_model_out_tok_s")


@dataclass(frozen=True)
class ErrorBar:
    figure: str
    low: float
    high: float
    runs: int
    device: str
    date: str

    def text(self) -> str:
        """"published runs: −12 % to +8 % (17 OnePlus 15R runs, bench/sweeps/phone_check.py 2026-12-04)"."""
        return (f"published runs: {_pct(self.low)} to {_pct(self.high)} ({self.runs} {self.device} runs, "
                f"bench/sweeps/phone_check.py {self.date})")


def _pct(x: float) -> str:
    return f"{100 * x:+.0f} %".replace("-", "\u2212")


def error_bar(figure: str, path: Path | None = None) -> ErrorBar | None:
    """The figure's measured error, or None where the check has not written it (or the file is unreadable:
    a projection is still printed, only without its error bar)."""
    try:
        data = json.loads((path or ERROR_FILE).read_text(encoding="utf-8"))
        low, high = data["figures"][figure]
        return ErrorBar(figure, float(low), float(high), int(data["runs"]), str(data["device"]), str(data["date"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def error_text(figure: str, path: Path | None = None) -> str:
    """The error bar's words, or a sentence saying there is none yet."""
    bar = error_bar(figure, path)
    return bar.text() if bar else "no measured error (run bench/sweeps/phone_check.py)"


def write_errors(figures: dict[str, tuple[float, float]], *, runs: int, device: str, date: str, source: str,
                 path: Path | None = None) -> Path:
    """The check's one writer: the (low, high) error of each figure, atomically."""
    from shardscope.engine.base.atomic_write import write_text_atomic

    target = path or ERROR_FILE
    body = {"written_by": "bench/sweeps/phone_check.py", "device": device, "date": date, "runs": runs, "source": source,
            "figures": {k: [round(lo, 4), round(hi, 4)] for k, (lo, hi) in figures.items()}}
    write_text_atomic(str(target), json.dumps(body, indent=1) + "\n")
    return target


__all__ = ["ERROR_FILE", "FIGURES", "ErrorBar", "error_bar", "error_text", "write_errors"]
