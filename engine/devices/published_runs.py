"""Published phone runs, projected: the device answer held against runs measured on a real phone.

A table of runs (tests/data/published-phone-runs.csv: BigMoeOnEdge's OnePlus 15R runs) gives, per
run, the model's route trace, k and the expert cache. From those alone each run is projected, then
set beside what the run published:

    a token's picks   P(k)  = k x sum of the trace header's expert bytes per layer
    hit               h     = the trace replayed through the cache (lru: their engine's policy) at the
                              run's cache MiB; the trace's own k (a run at another k is marked so)
    MiB a token       M     = the replay's missed bytes a token x k / k_trace  (= P(k) with the cache off)
    flash wait        F     = M read from the device's SSD model (sequential rate, a wait per request,
                              queue depth; one batch per layer: a layer waits for its router's picks)
    compute           C     = C_cal x T(k) / T(k_cal): C_cal from ONE cache-off run of the model (its
                              published compute + management seconds; else its s/token - F), T(k) =
                              the layer bytes a token touches (sum of dense bytes + P(k))
    tok/s             = 1 / (C + F)   misses are waited for: reads do not overlap compute
    overlapped bound  = 1 / max(C, F) an engine reading while it computes (their --overlap) at best

Nothing here reads a run's published MiB, hit, flash or tok/s to project it: those are only compared
(the calibration run's compute is the one published figure the projection takes in).
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.devices.devices import Device
from shardscope.engine.stream.ssd_rate_limiter import REQUEST_BYTES

COLUMNS = ("model", "trace", "k", "cache_mib", "decode_hit", "mib_per_token", "tok_s", "compute_s", "flash_s",
           "source")
ADDED_COLUMNS = ("projected_mib_per_token", "projected_tok_s", "projected_hit")
REPO_DIR = Path(__file__).resolve().parents[2]
PUBLISHED_RUNS = REPO_DIR / "tests" / "data" / "published-phone-runs.csv"
TRACE_DIR = REPO_DIR / "tests" / "data" / "route-traces"
REPLAY_POLICY = "lru"  # BigMoeOnEdge's expert cache (the replay of its Qwen3 trace gives its 80.3 % at 4000 MiB)


@dataclass(frozen=True)
class PublishedRun:
    """One row: a run's settings, and what it published (None where the row leaves it empty)."""

    model: str
    trace: str
    k: int
    cache_mib: float
    decode_hit: float | None
    mib_per_token: float | None
    tok_s: float | None
    compute_s: float | None
    flash_s: float | None
    source: str
    where: str  # "FILE line N", for messages
    trace_path: Path | None = None

    @property
    def label(self) -> str:
        return f"{self.model} k={self.k} cache {self.cache_mib:g} MiB"


@dataclass(frozen=True)
class ProjectedRun:
    run: PublishedRun
    hit: float  # 0..1, 0 with the cache off
    hit_note: str  # "replayed", "replayed at the trace's k=6", "cache off"
    mib_per_token: float
    flash_s: float
    compute_s: float
    calibration: bool  # the row compute was taken from

    @property
    def s_per_token(self) -> float:
        return self.compute_s + self.flash_s

    @property
    def tok_s(self) -> float:
        return 1.0 / self.s_per_token if self.s_per_token > 0 else math.inf

    @property
    def overlapped_tok_s(self) -> float:
        """The other bound: an engine that reads while it computes (--overlap) waits only for the longer."""
        longest = max(self.compute_s, self.flash_s)
        return 1.0 / longest if longest > 0 else math.inf

    def error(self, figure: str) -> float | None:
        """Projected / published - 1 for mib_per_token, flash_s, tok_s; None when not published."""
        published = getattr(self.run, figure)
        if published is None or published == 0:
            return None
        return getattr(self, figure) / published - 1.0


# ------------------------------------------------------------------------ reading
def _number(text: str, column: str, where: str, *, whole: bool = False, low: float = 0.0,
            optional: bool = False) -> float | int | None:
    text = text.strip()
    if not text:
        if optional:
            return None
        raise ShardscopeError(f"{where}: '{column}' is empty (it is needed to project the run)")
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise ShardscopeError(f"{where}: '{column}' must be {kind}, got {text!r}") from None
    if not math.isfinite(value) or value < low:
        raise ShardscopeError(f"{where}: '{column}' must be a finite number ≥ {low:g}, got {text!r}")
    return value


def read_runs(path: str | os.PathLike, trace_dir: str | os.PathLike = TRACE_DIR) -> list[PublishedRun]:
    """The rows of a runs file; any defect is one ShardscopeError naming the file, the line and what is wrong.
    A row's ``trace`` is a path (absolute, or relative to the runs file), else a name in ``trace_dir``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShardscopeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ShardscopeError(f"{path}: is a directory, not a runs CSV") from None
    except UnicodeDecodeError:
        raise ShardscopeError(f"{path}: not a text file, so not a runs CSV") from None
    except OSError as exc:
        raise ShardscopeError(f"{path}: cannot read ({exc.strerror})") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.startswith("#")]
    if not lines:
        raise ShardscopeError(f"{path}: empty, expected the header {','.join(COLUMNS)}")
    number, header_line = lines[0]
    header = [c.strip() for c in next(csv.reader([header_line]))]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ShardscopeError(f"{path} line {number}: missing column{'s' if len(missing) > 1 else ''} "
                              f"{', '.join(missing)} (the header must hold {','.join(COLUMNS)})")
    runs = []
    for number, line in lines[1:]:
        where = f"{path} line {number}"
        cells = next(csv.reader([line]))
        if len(cells) != len(header):
            raise ShardscopeError(f"{where}: {len(cells)} fields, expected {len(header)} ({','.join(header)})")
        row = dict(zip(header, cells))
        model = row["model"].strip()
        if not model:
            raise ShardscopeError(f"{where}: 'model' is empty")
        hit = _number(row["decode_hit"], "decode_hit", where, optional=True)
        if hit is not None and hit > 1:
            raise ShardscopeError(f"{where}: 'decode_hit' is a fraction from 0 to 1, got {hit:g}")
        run = PublishedRun(
            model=model, trace=row["trace"].strip(), k=_number(row["k"], "k", where, whole=True, low=1),
            cache_mib=_number(row["cache_mib"], "cache_mib", where), decode_hit=hit,
            mib_per_token=_number(row["mib_per_token"], "mib_per_token", where, optional=True),
            tok_s=_number(row["tok_s"], "tok_s", where, optional=True),
            compute_s=_number(row["compute_s"], "compute_s", where, optional=True),
            flash_s=_number(row["flash_s"], "flash_s", where, optional=True),
            source=row["source"].strip(), where=where)
        runs.append(replace(run, trace_path=_trace_path(run, path.parent, Path(trace_dir))))
    if not runs:
        raise ShardscopeError(f"{path}: no runs below the header")
    return runs


def _trace_path(run: PublishedRun, rows_dir: Path, trace_dir: Path) -> Path:
    if not run.trace:
        raise ShardscopeError(f"{run.where}: 'trace' is empty (name a route trace of {run.model})")
    given = Path(run.trace)
    for candidate in ([given] if given.is_absolute() else [rows_dir / given, trace_dir / given]):
        if candidate.is_file():
            return candidate
    raise ShardscopeError(f"{run.where}: trace file {run.trace!r} not found (looked beside the runs file and in "
                          f"{trace_dir})")


# ------------------------------------------------------------------------ projecting
class _Traces:
    """Each trace loaded once, each (trace, cache) replayed once."""

    def __init__(self, policy: str):
        self.policy = policy
        self._traces: dict[Path, object] = {}
        self._replays: dict[tuple[Path, int], object] = {}

    def trace(self, run: PublishedRun):
        from shardscope.engine.experts.foreign_traces import load_trace

        if run.trace_path not in self._traces:
            trace = load_trace(run.trace_path)
            if not trace.header.has_layer_bytes:
                raise ShardscopeError(f"{run.where}: trace {run.trace} has no dense bytes per layer in its header "
                                      "(a route_trace v1 trace has them): the compute scaling needs them")
            self._traces[run.trace_path] = trace
        trace = self._traces[run.trace_path]
        if run.k > trace.header.n_expert:
            raise ShardscopeError(f"{run.where}: k = {run.k} but the trace's model has {trace.header.n_expert} experts")
        return trace

    def replay(self, run: PublishedRun):
        from shardscope.engine.experts.replay import min_cache_bytes, replay_one

        trace = self.trace(run)
        cache = int(run.cache_mib * MIB)
        key = (run.trace_path, cache)
        if key not in self._replays:
            floor = min_cache_bytes(trace)
            if cache < floor:
                raise ShardscopeError(f"{run.where}: cache_mib {run.cache_mib:g} is below the {floor / MIB:.1f} MiB "
                                      f"one layer's picks need in {run.trace}")
            self._replays[key] = replay_one(trace, self.policy, cache)
        return self._replays[key]


def picks_bytes(header, k: int) -> float:
    """A token's picks in every layer: k x the header's expert bytes, summed over layers."""
    return float(k * sum(header.unit_bytes.values()))


def touched_layer_bytes(header, k: int) -> float:
    """The layer bytes a token touches (dense + picks): what compute is scaled by between k's."""
    return float(sum(header.dense_bytes.values())) + picks_bytes(header, k)


def flash_seconds(device: Device, mib_per_token: float, n_layers: int) -> float:
    """Seconds a token waits for its misses on the device's SSD model: one batch of reads per layer."""
    n_bytes = mib_per_token * MIB
    if n_bytes <= 0:
        return 0.0
    return device.ssd_model.read_seconds(n_bytes, n_bytes / REQUEST_BYTES, float(n_layers))


def _bytes_and_hit(run: PublishedRun, traces: _Traces) -> tuple[float, float, str]:
    header = traces.trace(run).header
    if run.cache_mib == 0:
        return picks_bytes(header, run.k) / MIB, 0.0, "cache off"
    row = traces.replay(run)
    note = "replayed" if run.k == header.n_expert_used else f"replayed at the trace's k={header.n_expert_used}"
    return row.expert_mb_per_token * run.k / header.n_expert_used, row.expert_hit_rate, note


def calibration_run(runs: list[PublishedRun], model: str, traces: _Traces) -> PublishedRun | None:
    """The model's one cache-off run compute is taken from: the first at the trace's k, else the first."""
    off = [r for r in runs if r.model == model and r.cache_mib == 0 and (r.compute_s is not None or r.tok_s)]
    if not off:
        return None
    at_trace_k = [r for r in off if r.k == traces.trace(r).header.n_expert_used]
    return (at_trace_k or off)[0]


def _calibrated_compute(cal: PublishedRun, device: Device, traces: _Traces) -> tuple[float, str]:
    if cal.compute_s is not None:
        return cal.compute_s, "its published compute + management seconds"
    header = traces.trace(cal).header
    flash = flash_seconds(device, picks_bytes(header, cal.k) / MIB, len(header.unit_bytes))
    return max(1.0 / cal.tok_s - flash, 0.0), "its s/token minus the projected flash wait (no compute_s given)"


@dataclass(frozen=True)
class Calibration:
    model: str
    run: PublishedRun
    compute_s: float
    how: str


def project_runs(runs: list[PublishedRun], device: Device, *, policy: str = REPLAY_POLICY,
                 calibration_pool: list[PublishedRun] = ()) -> tuple[list[ProjectedRun], dict[str, Calibration]]:
    """Every run projected; compute per model from one cache-off run among ``runs`` (else among
    ``calibration_pool``, e.g. the published table when a reader's rows hold no cache-off run)."""
    traces = _Traces(policy)
    calibrations: dict[str, Calibration] = {}
    for run in runs:
        if run.model in calibrations:
            continue
        cal = calibration_run(runs, run.model, traces) or calibration_run(list(calibration_pool), run.model, traces)
        if cal is None:
            raise ShardscopeError(f"{run.where}: no cache-off run of {run.model} (cache_mib 0 with compute_s or "
                                  "tok_s) to take its compute per token from: add one")
        compute, how = _calibrated_compute(cal, device, traces)
        calibrations[run.model] = Calibration(run.model, cal, compute, how)
    out = []
    for run in runs:
        header = traces.trace(run).header
        cal = calibrations[run.model]
        compute = cal.compute_s * touched_layer_bytes(header, run.k) / touched_layer_bytes(
            traces.trace(cal.run).header, cal.run.k)
        mib, hit, note = _bytes_and_hit(run, traces)
        out.append(ProjectedRun(run, hit, note, mib, flash_seconds(device, mib, len(header.unit_bytes)), compute,
                                calibration=run is cal.run))
    return out, calibrations


def rows_with_projection(projected: list[ProjectedRun]) -> list[dict]:
    """Each run as its input columns plus ``ADDED_COLUMNS`` (what --csv writes)."""
    out = []
    for p in projected:
        r = p.run
        row = {"model": r.model, "trace": r.trace, "k": r.k, "cache_mib": f"{r.cache_mib:g}",
               "decode_hit": _cell(r.decode_hit), "mib_per_token": _cell(r.mib_per_token), "tok_s": _cell(r.tok_s),
               "compute_s": _cell(r.compute_s), "flash_s": _cell(r.flash_s), "source": r.source,
               "projected_mib_per_token": f"{p.mib_per_token:.2f}", "projected_tok_s": f"{p.tok_s:.3f}",
               "projected_hit": f"{p.hit:.4f}"}
        out.append(row)
    return out


def _cell(value) -> str:
    return "" if value is None else f"{value:g}"


__all__ = ["COLUMNS", "ADDED_COLUMNS", "PUBLISHED_RUNS", "TRACE_DIR", "REPLAY_POLICY", "PublishedRun", "ProjectedRun",
           "Calibration", "read_runs", "project_runs", "rows_with_projection", "picks_bytes", "touched_layer_bytes",
           "flash_seconds", "calibration_run"]
