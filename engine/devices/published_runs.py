"""Published phone runs, projected: the device answer held against runs measured on a real phone.

A table of runs (tests/data/published-phone-runs.csv: BigMoeOnEdge's OnePlus 15R runs) gives, per
run, the model's route trace, k, the expert cache, the I/O lanes and whether its engine overlapped
reads with compute. From those alone each run is projected, then set beside what the run published:

    a token's picks   P(k)  = k x sum of the trace header's expert bytes per layer
    hit, misses       the trace replayed through the cache (lru: their engine's policy) at the run's
                      cache MiB and k (engine/devices/replay_at_k.py: a k below the trace's is its
                      top-k cut, replayed; a k above it cannot be, and says by how much it may be off)
    MiB a token       M     = the missed experts' bytes a token  (= P(k) with the cache off)
    flash             F     = each decoded layer's misses read as one batch (a layer waits for its
                              router's picks) on the device's flash model (Device.flash_model: fitted
                              from its probe) with the run's lanes in flight; a missed expert is one
                              read per projection slice, as their engine reads it (_SLICES)
    compute           C     = c x T(k) + g x M: c = compute per byte, from ONE cache-off run (its published
                              compute + management seconds / the layer bytes its token touches), T(k) = the
                              layer bytes a token touches (dense + P(k)); the calibration run is the model's
                              own (project_runs) or another model's (leave_one_model_out); g = the device's
                              cache management per missed MiB (its preset; 0 with the cache off)
    serial            1 / (C + F)      the engine waits for its reads: nothing overlapped
    overlapped bound  1 / max(C, F)    an engine reading while it computes (their --overlap) at best

A serial engine's run should land on the serial figure, an overlapping one's between the two; an
overlapping run publishes as flash only the stall its compute did not hide, which lies between
max(F - C, 0) and F. Nothing here reads a run's published MiB, hit, flash or tok/s to project it:
those are only compared (the calibration run's compute is the one published figure taken in).
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

COLUMNS = ("model", "trace", "k", "cache_mib", "decode_hit", "mib_per_token", "tok_s", "compute_s", "flash_s",
           "source")
# Optional: the run's I/O lanes (default: the device's queue depth) and its engine, serial or overlap
# (default serial): the flash model reads with that many in flight; an overlap run's flash_s is its stall.
OPTIONAL_COLUMNS = ("lanes", "engine")
ENGINES = ("serial", "overlap")
ADDED_COLUMNS = ("projected_mib_per_token", "projected_hit", "projected_flash_s", "projected_compute_s",
                 "projected_serial_tok_s", "projected_overlapped_tok_s", "projected_tok_s")
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
    lanes: int | None = None  # I/O requests in flight; None: the device's queue depth
    engine: str = "serial"  # "overlap": reads overlap compute (their --overlap); flash_s is then the stall

    @property
    def label(self) -> str:
        return f"{self.model} k={self.k} cache {self.cache_mib:g} MiB"


@dataclass(frozen=True)
class ProjectedRun:
    run: PublishedRun
    hit: float  # 0..1, 0 with the cache off
    hit_note: str  # "replayed", "cache off", "the trace's k=6 miss rate kept, ..."
    mib_per_token: float
    flash_s: float  # F: the seconds a token's reads take (a serial engine waits them all)
    compute_s: float
    calibration: bool  # the row compute was taken from
    may_be_off: float | None = 0.0  # the hit re-scaling's own uncertainty (share of the misses); None unknown

    @property
    def serial_s(self) -> float:
        return self.compute_s + self.flash_s

    @property
    def overlapped_s(self) -> float:
        return max(self.compute_s, self.flash_s)

    @property
    def serial_tok_s(self) -> float:
        """The serial time's tok/s: compute + flash, nothing overlapped."""
        return 1.0 / self.serial_s if self.serial_s > 0 else math.inf

    @property
    def overlapped_tok_s(self) -> float:
        """The overlapped bound: an engine that reads while it computes waits only for the longer (best case)."""
        return 1.0 / self.overlapped_s if self.overlapped_s > 0 else math.inf

    @property
    def tok_s(self) -> float:
        """The figure of the run's own engine: serial for a serial engine, the bound for an overlapping one."""
        return self.overlapped_tok_s if self.run.engine == "overlap" else self.serial_tok_s

    @property
    def stall_range(self) -> tuple[float, float]:
        """What an overlapping engine waits for its reads: between F - C (all of compute hides reads) and F."""
        return max(self.flash_s - self.compute_s, 0.0), self.flash_s

    def error(self, figure: str) -> float | None:
        """Projected / published - 1 for mib_per_token, flash_s, tok_s; None when not published."""
        published = getattr(self.run, figure)
        if published is None or published == 0:
            return None
        return getattr(self, figure) / published - 1.0

    def flash_error(self) -> float | None:
        """A serial run: F / published - 1. An overlapping run publishes its stall: 0 inside the stall
        range, else the nearer end / published - 1."""
        if self.run.flash_s is None or self.run.flash_s == 0:
            return None
        if self.run.engine != "overlap":
            return self.flash_s / self.run.flash_s - 1.0
        return _outside(self.run.flash_s, *self.stall_range)

    def tok_s_error(self) -> float | None:
        """0 when the published tok/s lies between the serial figure and the overlapped bound, else
        the nearer figure / published - 1 (negative: the run was faster than the bound)."""
        if not self.run.tok_s:
            return None
        return _outside(self.run.tok_s, self.serial_tok_s, self.overlapped_tok_s)


def _outside(published: float, low: float, high: float) -> float:
    """0 if low <= published <= high, else the nearer end / published - 1."""
    if low <= published <= high:
        return 0.0
    nearer = low if published < low else high
    return nearer / published - 1.0


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
            source=row["source"].strip(), where=where,
            lanes=_number(row.get("lanes", ""), "lanes", where, whole=True, low=1, optional=True),
            engine=_engine(row.get("engine", ""), where))
        runs.append(replace(run, trace_path=_trace_path(run, path.parent, Path(trace_dir))))
    if not runs:
        raise ShardscopeError(f"{path}: no runs below the header")
    return runs


def _engine(text: str, where: str) -> str:
    text = (text or "").strip() or "serial"
    if text not in ENGINES:
        raise ShardscopeError(f"{where}: 'engine' must be one of {', '.join(ENGINES)}, got {text!r}")
    return text


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
# How their engine reads one missed expert: one O_DIRECT read per projection slice, the fused gate+up
# of gemma4 being one slice of two projections (BigMoeOnEdge core/src/moe/arch_registry.cpp; one
# read per slice: core/src/moe/expert_stream_source.cpp, load_layer). Shares of the expert's bytes.
_SLICES = {"qwen3moe": (1, 1, 1), "gemma4": (2, 1), "gpt-oss": (1, 1, 1)}
_DEFAULT_SLICES = (1, 1, 1)  # gate, up, down


def trace_arch(path: Path) -> str:
    """The arch= of a route_trace v1 header ("" when the header has none)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for _ in range(3):
            for word in fh.readline().split():
                if word.startswith("arch="):
                    return word[len("arch="):]
    return ""


def expert_reads(expert_bytes: int, arch: str) -> list[int]:
    """The request sizes one missed expert is read in."""
    shares = _SLICES.get(arch, _DEFAULT_SLICES)
    return [round(expert_bytes * part / sum(shares)) for part in shares]


class _Traces:
    """Each trace loaded once, each (trace, cache, k) replayed once."""

    def __init__(self, policy: str):
        self.policy = policy
        self._traces: dict[Path, object] = {}
        self._arch: dict[Path, str] = {}
        self._replays: dict[tuple[Path, int, int], object] = {}

    def trace(self, run: PublishedRun):
        from shardscope.engine.experts.foreign_traces import load_trace
        if run.trace_path not in self._traces:
            trace = load_trace(run.trace_path)
            if not trace.header.has_layer_bytes:
                raise ShardscopeError(f"{run.where}: trace {run.trace} has no dense bytes per layer in its header "
                                      "(a route_trace v1 trace has them): the compute scaling needs them")
            self._traces[run.trace_path] = trace
            self._arch[run.trace_path] = trace_arch(run.trace_path)
        trace = self._traces[run.trace_path]
        if run.k > trace.header.n_expert:
            raise ShardscopeError(f"{run.where}: k = {run.k} but the trace's model has {trace.header.n_expert} experts")
        return trace

    def arch(self, run: PublishedRun) -> str:
        self.trace(run)
        return self._arch[run.trace_path]

    def replay(self, run: PublishedRun):
        from shardscope.engine.devices.replay_at_k import replay_at_k
        from shardscope.engine.experts.replay import min_cache_bytes
        trace = self.trace(run)
        cache = int(run.cache_mib * MIB)
        key = (run.trace_path, cache, run.k)
        if key not in self._replays:
            floor = min_cache_bytes(trace)
            if cache < floor:
                raise ShardscopeError(f"{run.where}: cache_mib {run.cache_mib:g} is below the {floor / MIB:.1f} MiB "
                                      f"one layer's picks need in {run.trace}")
            self._replays[key] = replay_at_k(trace, self.policy, cache, run.k)
        return self._replays[key]


def picks_bytes(header, k: int) -> float:
    """A token's picks in every layer: k x the header's expert bytes, summed over layers."""
    return float(k * sum(header.unit_bytes.values()))


def touched_layer_bytes(header, k: int) -> float:
    """The layer bytes a token touches (dense + picks): what compute is scaled by between k's and models."""
    return float(sum(header.dense_bytes.values())) + picks_bytes(header, k)


def flash_seconds(device: Device, accesses, header, arch: str, lanes: int | None = None, n_tokens: int = 1,
                  cache: bool = False) -> float:
    """Seconds a token's reads take on the device's flash model: each (layer, experts missed) access one
    batch of its experts' slices, ``lanes`` in flight (default the device's); a fractional count of
    experts interpolates between the whole numbers around it. Summed, then divided by ``n_tokens``."""
    flash = device.cache_flash_model if cache else device.flash_model
    if lanes is not None and lanes != flash.queue_depth:
        flash = replace(flash, queue_depth=lanes)
    memo: dict[tuple[int, int], float] = {}

    def batch(layer: int, n: int) -> float:
        key = (header.unit_bytes[layer], n)
        if key not in memo:
            memo[key] = flash.batch_seconds(expert_reads(header.unit_bytes[layer], arch) * n)
        return memo[key]

    total = 0.0
    for layer, n in accesses:
        lo = math.floor(n)
        total += batch(layer, lo) + (n - lo) * (batch(layer, lo + 1) - batch(layer, lo)) if n > lo else batch(layer, lo)
    return total / n_tokens


def _bytes_hit_flash(run: PublishedRun, device: Device, traces: _Traces):
    """(MiB a token, hit, note, flash seconds, may be off) of a run."""
    trace = traces.trace(run)
    header = trace.header
    arch = traces.arch(run)
    if run.cache_mib == 0:  # every pick read: one batch of k experts a layer
        accesses = [(layer, float(run.k)) for layer in sorted(header.unit_bytes)]
        return (picks_bytes(header, run.k) / MIB, 0.0, "cache off",
                flash_seconds(device, accesses, header, arch, run.lanes), 0.0)
    row = traces.replay(run)
    flash = flash_seconds(device, row.accesses, header, arch, run.lanes, row.n_tokens, cache=True)
    return row.missed_mib_per_token, row.hit, row.note, flash, row.may_be_off


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
    _, _, _, flash, _ = _bytes_hit_flash(cal, device, traces)
    return max(1.0 / cal.tok_s - flash, 0.0), "its s/token minus the projected flash (no compute_s given)"


@dataclass(frozen=True)
class Calibration:
    model: str
    run: PublishedRun
    compute_s: float
    how: str
    touched_bytes: float = 0.0  # T(k) of the calibration run: compute per byte = compute_s / touched_bytes

    @property
    def s_per_byte(self) -> float:
        return self.compute_s / self.touched_bytes


def _calibrate(cal: PublishedRun, device: Device, traces: _Traces) -> Calibration:
    compute, how = _calibrated_compute(cal, device, traces)
    return Calibration(cal.model, cal, compute, how, touched_layer_bytes(traces.trace(cal).header, cal.k))


def _project(run: PublishedRun, cal: Calibration, device: Device, traces: _Traces) -> ProjectedRun:
    mib, hit, note, flash, off = _bytes_hit_flash(run, device, traces)
    compute = cal.s_per_byte * touched_layer_bytes(traces.trace(run).header, run.k)
    if run.cache_mib > 0:  # the cache's pages for each miss (their compute_s includes it)
        compute += device.cache_mgmt_us_per_mib * 1e-6 * mib
    touch = bool(device.first_touch_from) and run.source.startswith(device.first_touch_from)  # calibrated f on it
    return ProjectedRun(run, hit, note, mib, flash, compute, calibration=run is cal.run or touch, may_be_off=off)


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
        calibrations[run.model] = _calibrate(cal, device, traces)
    return [_project(run, calibrations[run.model], device, traces) for run in runs], calibrations


def leave_one_model_out(runs: list[PublishedRun], device: Device, *, policy: str = REPLAY_POLICY
                        ) -> dict[str, list[ProjectedRun]]:
    """Per calibrating model, every OTHER model's runs projected with its compute per byte: how the
    answer transfers to a model nobody measured (a user's own). Models without a cache-off run calibrate nothing."""
    traces = _Traces(policy)
    out: dict[str, list[ProjectedRun]] = {}
    for model in dict.fromkeys(r.model for r in runs):
        cal_run = calibration_run(runs, model, traces)
        if cal_run is None:
            continue
        cal = _calibrate(cal_run, device, traces)
        out[model] = [_project(run, cal, device, traces) for run in runs if run.model != model]
    return out


def rows_with_projection(projected: list[ProjectedRun]) -> list[dict]:
    """Each run as its input columns plus ``ADDED_COLUMNS`` (what --csv writes)."""
    out = []
    for p in projected:
        r = p.run
        row = {"model": r.model, "trace": r.trace, "k": r.k, "cache_mib": f"{r.cache_mib:g}",
               "decode_hit": _cell(r.decode_hit), "mib_per_token": _cell(r.mib_per_token), "tok_s": _cell(r.tok_s),
               "compute_s": _cell(r.compute_s), "flash_s": _cell(r.flash_s), "source": r.source,
               "lanes": "" if r.lanes is None else str(r.lanes), "engine": r.engine,
               "projected_mib_per_token": f"{p.mib_per_token:.2f}", "projected_hit": f"{p.hit:.4f}",
               "projected_flash_s": f"{p.flash_s:.4f}", "projected_compute_s": f"{p.compute_s:.4f}",
               "projected_serial_tok_s": f"{p.serial_tok_s:.3f}",
               "projected_overlapped_tok_s": f"{p.overlapped_tok_s:.3f}", "projected_tok_s": f"{p.tok_s:.3f}"}
        out.append(row)
    return out


def _cell(value) -> str:
    return "" if value is None else f"{value:g}"

__all__ = ["COLUMNS", "OPTIONAL_COLUMNS", "ADDED_COLUMNS", "ENGINES", "PUBLISHED_RUNS", "TRACE_DIR", "REPLAY_POLICY",
           "PublishedRun", "ProjectedRun", "Calibration", "read_runs", "project_runs", "leave_one_model_out",
           "rows_with_projection", "picks_bytes", "touched_layer_bytes", "flash_seconds", "calibration_run",
           "expert_reads", "trace_arch"]
