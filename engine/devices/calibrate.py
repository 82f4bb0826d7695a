"""``shardscope calibrate``: fit a device's speed from a real llama-bench run on it.

The rule (docs/calibration.md has it with its error on held-out rows):

* The rows of a known model measured on the device are paired with the same model's
  rows measured on this machine (``--reference FILE``, or a run of the bundled model
  here when the device ran it too). A model is the same when llama.cpp describes it
  the same: ``model_type``, ``model_size`` and ``model_n_params``.
* **compute_scale** (the device's per-core speed relative to this machine, as
  engine.devices.projection uses it) = device rate per core ÷ host rate per core, where a device row's cores are
  ``min(n_threads, performance cores)`` — the projection's own thread rule — and a host row's are its ``n_threads``. The
  rates are prompt processing (pp) when both sides have pp rows, since pp is compute-bound;
  otherwise text generation (tg). Every repetition (``samples_ts``) is one observation;
  rates are averaged as time per token is (harmonic mean: tokens over total time), so
  one slow repetition weighs as the seconds it took, as it would in a projection.
* **dram_mb_s**, where the rows allow: tg reads every weight once per token, so model
  bytes × tg rate is the bandwidth llama.cpp attained on the device — a lower bound of
  the DRAM's, and the one the projection's DRAM term needs. Only from tg rows that used
  all of the device's performance cores (fewer threads would measure the threads, not
  the memory).
* Held-out error: each device tg observation is predicted from the other observations'
  rate per core (leave one out: the fit without it) times its cores; the median
  absolute error is reported and stored.

Bad files (unreadable, not llama-bench rows, no tg rows, a model this machine has no
rows for) raise ShardscopeError naming the file; nothing is written then.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from shardscope.engine.base.errors import ShardscopeError

REQUIRED_FIELDS = ("model_type", "model_size", "model_n_params", "n_threads", "n_prompt", "n_gen", "avg_ts")
_NUMBERS = ("model_size", "model_n_params", "n_threads", "n_prompt", "n_gen", "avg_ts")


@dataclass(frozen=True)
class Observation:
    """One timed repetition of one llama-bench test."""

    kind: str  # "pp" or "tg"
    rate: float  # tokens per second
    threads: int
    model: tuple[str, int, int]  # (model_type, model_size, model_n_params)


@dataclass(frozen=True)
class Fit:
    compute_scale: float
    basis: str  # "pp" or "tg": which rates the scale came from
    device_rate_per_core: float
    host_rate_per_core: float
    dram_mb_s: float | None  # None when the rows do not allow it
    dram_note: str
    held_out_error_pct: float  # NaN with a single tg observation
    n_device: int
    n_host: int
    model: tuple[str, int, int]


# ------------------------------------------------------------------ reading
def read_rows(path: str | Path) -> list[dict]:
    """llama-bench rows from a JSON array, JSONL or CSV file (what ``-o json|jsonl|csv`` print)."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShardscopeError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ShardscopeError(f"{where}: is a directory, not a llama-bench result") from None
    except UnicodeDecodeError:
        raise ShardscopeError(f"{where}: not a llama-bench result (not UTF-8 text)") from None
    except OSError as exc:
        raise ShardscopeError(f"{where}: cannot read ({exc.strerror or exc})") from None
    stripped = text.strip()
    if not stripped:
        raise ShardscopeError(f"{where}: empty file, no llama-bench rows")
    try:
        data = json.loads(stripped)
        rows = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        rows = None
    if rows is None and stripped.startswith("{"):
        rows = []
        for number, line in enumerate(stripped.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ShardscopeError(f"{where}: line {number} is not JSON ({exc.msg})") from None
    if rows is None:
        rows = list(csv.DictReader(io.StringIO(text)))
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise ShardscopeError(f"{where}: not llama-bench rows (expected JSON objects, JSONL or CSV with a header)")
    return rows


def _number(row: dict, key: str, where: str, index: int) -> float:
    value = row[key]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ShardscopeError(f"{where}: row {index}: '{key}' must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ShardscopeError(f"{where}: row {index}: '{key}' must be a finite number ≥ 0, got {value!r}")
    return number


def observations(rows: list[dict], where: str) -> list[Observation]:
    """Every timed repetition in the rows; the schema is checked first, row by row."""
    out = []
    for index, row in enumerate(rows, 1):
        missing = [f for f in REQUIRED_FIELDS if f not in row]
        if missing:
            raise ShardscopeError(f"{where}: not llama-bench rows: row {index} has no {', '.join(missing)}")
        n = {k: _number(row, k, where, index) for k in _NUMBERS}
        if n["n_threads"] < 1:
            raise ShardscopeError(f"{where}: row {index}: 'n_threads' must be at least 1")
        if n["n_prompt"] > 0 and n["n_gen"] == 0:
            kind = "pp"
        elif n["n_gen"] > 0 and n["n_prompt"] == 0:
            kind = "tg"
        else:
            continue  # pp+tg rows mix both speeds: no single rate to fit
        samples = row.get("samples_ts")
        rates = [float(x) for x in samples] if isinstance(samples, list) and samples else [n["avg_ts"]]
        model = (str(row["model_type"]), int(n["model_size"]), int(n["model_n_params"]))
        out.extend(Observation(kind, r, int(n["n_threads"]), model) for r in rates if r > 0)
    return out


def model_text(model: tuple[str, int, int]) -> str:
    name, size, params = model
    return f"'{name}' ({size / 2**20:.0f} MiB, {params / 1e6:.0f} M parameters)"


# ------------------------------------------------------------------ fitting
def fit(device_obs: list[Observation], host_obs: list[Observation], performance_cores: int,
        where: str = "results") -> Fit:
    """The rule in the module doc; pure, so tests and docs can check it on any numbers."""
    tg = [o for o in device_obs if o.kind == "tg"]
    if not tg:
        raise ShardscopeError(f"{where}: no text-generation (tg) rows: run llama-bench with -n above 0")
    models = {o.model for o in tg}
    host_models = {o.model for o in host_obs}
    model = next((m for m in models if m in host_models), None)
    if model is None:
        raise ShardscopeError(f"{where}: no rows of this machine for model {model_text(sorted(models)[0])}: "
                              f"run it here with `shardscope bench -o jsonl` and pass --reference")
    dev = [o for o in device_obs if o.model == model]
    host = [o for o in host_obs if o.model == model]
    basis = "pp" if any(o.kind == "pp" for o in dev) and any(o.kind == "pp" for o in host) else "tg"

    def per_core_device(o: Observation) -> float:
        return o.rate / min(o.threads, performance_cores)

    dev_rates = [per_core_device(o) for o in dev if o.kind == basis]
    host_rates = [o.rate / o.threads for o in host if o.kind == basis]
    if not host_rates:
        raise ShardscopeError(f"{where}: this machine has no {basis} rows for model {model_text(model)}")
    host_rate = statistics.harmonic_mean(host_rates)
    dev_rate = statistics.harmonic_mean(dev_rates)
    scale = dev_rate / host_rate

    tg_dev = [o for o in dev if o.kind == "tg"]
    errors = []
    if len(tg_dev) > 1:
        # scale x host rate per core is the device's rate per core; fitted without the held-out one
        for i, held in enumerate(tg_dev):
            rest = statistics.harmonic_mean([per_core_device(o) for j, o in enumerate(tg_dev) if j != i])
            predicted = rest * min(held.threads, performance_cores)
            errors.append(abs(predicted - held.rate) / held.rate * 100.0)
    held_out = statistics.median(errors) if errors else math.nan

    full = [o for o in tg_dev if o.threads >= performance_cores]
    if full:
        dram = model[1] * statistics.harmonic_mean([o.rate for o in full]) / 1e6
        dram_note = (f"model bytes x tg rate on {len(full)} observation(s) at ≥ {performance_cores} threads "
                     f"(the bandwidth llama.cpp attained: a lower bound of the DRAM's)")
    else:
        dram = None
        dram_note = (f"not fitted: the tg rows used fewer threads than the device's {performance_cores} "
                     f"performance cores")
    return Fit(compute_scale=scale, basis=basis, device_rate_per_core=dev_rate, host_rate_per_core=host_rate,
               dram_mb_s=dram, dram_note=dram_note, held_out_error_pct=held_out, n_device=len(dev_rates),
               n_host=len(host_rates), model=model)


# ------------------------------------------------------------ the command
def calibrate(device_id: str, results_path: str, *, reference_path: str | None = None,
              measure_here: Callable[[tuple[str, int, int], str], list[Observation]] | None = None,
              ) -> tuple[Fit, Path]:
    """Fit, then store in the user's device file; nothing is written when anything is refused.
    Without reference rows, `measure_here(model, where)` runs this machine (it lives with the runs,
    engine/runs/calibration_reference.py, so devices never import the run layer)."""
    from shardscope.engine.devices.devices import get_device

    device = get_device(device_id)
    where = str(results_path)
    device_obs = observations(read_rows(results_path), where)
    if not any(o.kind == "tg" for o in device_obs):
        raise ShardscopeError(f"{where}: no text-generation (tg) rows: run llama-bench with -n above 0")
    if reference_path:
        host_obs = observations(read_rows(reference_path), str(reference_path))
    else:
        model = next(o.model for o in device_obs if o.kind == "tg")
        if measure_here is None:
            raise ShardscopeError(f"{where}: no reference rows: pass --reference with this machine's rows")
        host_obs = measure_here(model, where)
    result = fit(device_obs, host_obs, device.performance_cores, where)
    source_file = str(Path(results_path).resolve())
    day = time.strftime("%Y-%m-%d", time.gmtime())
    reference = str(Path(reference_path).resolve()) if reference_path else "a run of the bundled model here"
    error = "n/a (one observation)" if math.isnan(result.held_out_error_pct) else f"{result.held_out_error_pct:.1f} %"
    common = {"verified": True, "calibrated_from": source_file, "calibrated_on": day}
    quantities = {"compute_scale": {
        "value": round(result.compute_scale, 4),
        "source": (f"calibrated from {Path(results_path).name} on {day}: {result.basis} rate per core "
                   f"{result.device_rate_per_core:.4g} tok/s on the device ({result.n_device} observations) vs "
                   f"{result.host_rate_per_core:.4g} here ({result.n_host}, {reference}), model "
                   f"{model_text(result.model)}; held-out error {error}"),
        **common}}
    if result.dram_mb_s is not None:
        quantities["dram_mb_s"] = {
            "value": round(result.dram_mb_s, 1),
            "source": f"calibrated from {Path(results_path).name} on {day}: {result.dram_note}",
            **common}
    return result, save_calibration(device.id, quantities)


def save_calibration(device_id: str, quantities: dict[str, dict]) -> Path:
    """Write the user's calibration file for a built-in device, atomically.

    ``quantities`` maps a CALIBRATED_QUANTITIES key to its table (value, source,
    verified, calibrated_from, calibrated_on). The result is read back through
    ``apply_calibration`` before it replaces the old file, so a file that would not
    load is never left behind.
    """
    import tomli_w

    from shardscope.engine.base.atomic_write import write_text_atomic
    from shardscope.engine.devices.devices import apply_calibration, calibration_path, get_device

    device = get_device(device_id)
    path = calibration_path(device_id)
    text = ("# Written by `shardscope calibrate`: measured values that replace the built-in preset's.\n"
            + tomli_w.dumps({"id": device_id, **quantities}))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ShardscopeError(f"{path.parent}: cannot create ({exc.strerror or exc})") from None
    check = path.with_name(f".{path.name}.check")
    try:
        write_text_atomic(check, text)
        apply_calibration(replace(device, calibrated={}), check)
        check.replace(path)
    finally:
        check.unlink(missing_ok=True)
    return path
