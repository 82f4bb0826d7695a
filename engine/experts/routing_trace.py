"""Routing traces: which experts each layer's router picked, per pass, as JSON lines.

A trace lets expert-cache policies be compared offline (``shardscope replay``) in
seconds instead of re-running the model. Line 1 is a header describing the model
(expert counts, bytes of one expert per layer); every later line is one access:

    {"token": 5, "layer": 3, "experts": [1, 7, ...]}                    one decoded token
    {"token": 0, "layer": 3, "experts": [...], "counts": [...], "prompt": true}
                                          the prompt pass: the union of its tokens' picks,
                                          with how many prompt tokens picked each

The header's optional ``hash_layers`` lists layers that route by token id (DeepSeek V4's first
layers): replay and trace-stats report them apart, their picks being known ahead of the layer.

Traces are written to a temporary file and renamed into place when complete, so a
stopped run never leaves half a trace; one killed outright (SIGKILL) leaves its temp
file, which the next trace written to the same path removes (engine/base/stale_temp.py).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.stale_temp import remove_stale_temps, temp_prefix

FORMAT_KEY = "shardscope_routing_trace"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class TraceHeader:
    model: str
    n_expert: int
    n_expert_used: int
    unit_bytes: dict[int, int]  # layer → bytes of one expert of that layer
    # layer → bytes every token touches besides the routed experts (attention, norms, router,
    # shared experts), where the trace's header gives them (route_trace v1's dense_bytes=); else empty
    dense_bytes: dict[int, int] = field(default_factory=dict)
    # layers that route by token id (deepseek4's ffn_gate_tid2eid): their picks are known once the token
    # is, so a run loads them ahead of the layer (engine/experts/hash_prefetch.py); () for scored routers
    hash_layers: tuple[int, ...] = ()

    def to_json(self) -> dict:
        out = {FORMAT_KEY: FORMAT_VERSION, "model": self.model, "n_expert": self.n_expert,
               "n_expert_used": self.n_expert_used, "unit_bytes": {str(k): v for k, v in self.unit_bytes.items()}}
        if self.dense_bytes:
            out["dense_bytes"] = {str(k): v for k, v in self.dense_bytes.items()}
        if self.hash_layers:
            out["hash_layers"] = list(self.hash_layers)
        return out

    @property
    def has_layer_bytes(self) -> bool:
        """True when every layer with experts also has its dense bytes: the header alone then
        gives what a token touches per layer (size --trace needs nothing else)."""
        return bool(self.dense_bytes) and set(self.unit_bytes) <= set(self.dense_bytes)


@dataclass(frozen=True, slots=True)  # slots: a long session keeps ~10^5 of them in memory
class TraceRecord:
    token: int
    layer: int
    experts: tuple[int, ...]
    counts: tuple[int, ...] = ()
    prompt: bool = False
    weights: tuple[float, ...] = ()  # the router's weight of each pick, where the trace has them

    def to_json(self) -> dict:
        out = {"token": self.token, "layer": self.layer, "experts": list(self.experts)}
        if self.prompt:
            out["counts"] = list(self.counts)
            out["prompt"] = True
        if self.weights:
            out["weights"] = list(self.weights)
        return out


@dataclass(frozen=True)
class RoutingTrace:
    header: TraceHeader
    records: tuple[TraceRecord, ...]

    @property
    def n_decoded(self) -> int:
        return len({r.token for r in self.records if not r.prompt})


class TraceWriter:
    """Appends records to ``<path>``'s temp file; ``close()`` renames it into place."""

    def __init__(self, path: str | os.PathLike, header: TraceHeader):
        self.path = Path(path)
        directory = self.path.parent if str(self.path.parent) else Path(".")
        remove_stale_temps(self.path)
        try:
            fd, self._tmp = tempfile.mkstemp(prefix=temp_prefix(self.path), suffix=".tmp", dir=directory)
        except OSError as exc:
            raise ShardscopeError(f"{self.path}: cannot write the trace here ({exc.strerror})") from None
        self._fh = os.fdopen(fd, "w")
        self._fh.write(json.dumps(header.to_json()) + "\n")

    def write(self, record: TraceRecord) -> None:
        self._fh.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._fh is None:
            return
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            self._fh = None
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self.discard()
            raise ShardscopeError(f"{self.path}: could not be written ({exc.strerror or exc})") from None

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        try:
            os.unlink(self._tmp)
        except OSError:
            pass


def _int(value, what: str, where: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ShardscopeError(f"{where}: '{what}' must be a whole number ≥ {low}, got {value!r}")
    return value


def _header(obj, where: str) -> TraceHeader:
    if not isinstance(obj, dict) or obj.get(FORMAT_KEY) != FORMAT_VERSION:
        raise ShardscopeError(f"{where}: not a shardscope routing trace (the first line has no "
                              f"\"{FORMAT_KEY}\": {FORMAT_VERSION})")
    n_expert = _int(obj.get("n_expert"), "n_expert", where, 1)
    used = _int(obj.get("n_expert_used"), "n_expert_used", where, 1)
    raw = obj.get("unit_bytes")
    if not isinstance(raw, dict) or not raw:
        raise ShardscopeError(f"{where}: 'unit_bytes' must map layers to the bytes of one expert")
    unit_bytes = {}
    for key, value in raw.items():
        if not str(key).isdigit():
            raise ShardscopeError(f"{where}: 'unit_bytes' has a layer {key!r} that is not a number")
        unit_bytes[int(key)] = _int(value, f"unit_bytes[{key}]", where, 1)
    raw_dense = obj.get("dense_bytes", {})  # optional: written by traces that know them
    if not isinstance(raw_dense, dict):
        raise ShardscopeError(f"{where}: 'dense_bytes' must map layers to bytes")
    dense_bytes = {}
    for key, value in raw_dense.items():
        if not str(key).isdigit():
            raise ShardscopeError(f"{where}: 'dense_bytes' has a layer {key!r} that is not a number")
        dense_bytes[int(key)] = _int(value, f"dense_bytes[{key}]", where, 0)
    raw_hash = obj.get("hash_layers", [])  # optional: traces of files with hash-routed layers
    if not isinstance(raw_hash, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x in unit_bytes
                                                 for x in raw_hash):
        raise ShardscopeError(f"{where}: 'hash_layers' must list layers among the header's layers")
    return TraceHeader(str(obj.get("model", "")), n_expert, used, unit_bytes, dense_bytes, tuple(sorted(set(raw_hash))))


def _record(obj, header: TraceHeader, where: str) -> TraceRecord:
    if not isinstance(obj, dict):
        raise ShardscopeError(f"{where}: expected an object with token, layer and experts")
    token = _int(obj.get("token"), "token", where)
    layer = _int(obj.get("layer"), "layer", where)
    if layer not in header.unit_bytes:
        raise ShardscopeError(f"{where}: layer {layer} is not among the header's layers")
    experts = obj.get("experts")
    if not isinstance(experts, list) or not experts or not all(
            isinstance(e, int) and not isinstance(e, bool) and 0 <= e < header.n_expert for e in experts):
        raise ShardscopeError(f"{where}: 'experts' must be a non-empty list of expert numbers below "
                              f"{header.n_expert}")
    prompt = obj.get("prompt", False) is True
    counts = obj.get("counts", [])
    if prompt and (not isinstance(counts, list) or len(counts) != len(experts)
                   or not all(isinstance(c, int) and c > 0 for c in counts)):
        raise ShardscopeError(f"{where}: 'counts' must give a positive count for each expert")
    weights = obj.get("weights", [])
    if not isinstance(weights, list) or (weights and (len(weights) != len(experts) or not all(
            isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in weights))):
        raise ShardscopeError(f"{where}: 'weights' must give a finite number for each expert")
    return TraceRecord(token, layer, tuple(experts), tuple(counts) if prompt else (), prompt,
                       tuple(float(w) for w in weights))


def open_trace_file(path: Path):
    """The trace file opened as text; a missing file or a directory is one ShardscopeError."""
    try:
        return open(path, encoding="utf-8")
    except FileNotFoundError:
        raise ShardscopeError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ShardscopeError(f"{path}: is a directory, not a routing trace") from None
    except OSError as exc:
        raise ShardscopeError(f"{path}: cannot open ({exc.strerror})") from None


def read_trace(path: str | os.PathLike) -> RoutingTrace:
    """Parse and check a trace; any defect is one ShardscopeError naming the file and line."""
    path = Path(path)
    handle = open_trace_file(path)
    header = None
    records: list[TraceRecord] = []
    with handle:
        try:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"{path} line {number}"
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise ShardscopeError(f"{where}: not JSON (a routing trace has one JSON object a line)") from None
                if header is None:
                    header = _header(obj, where)
                else:
                    records.append(_record(obj, header, where))
        except UnicodeDecodeError:
            raise ShardscopeError(f"{path}: not a text file, so not a routing trace") from None
    if header is None:
        raise ShardscopeError(f"{path}: empty file, not a routing trace")
    if not records:
        raise ShardscopeError(f"{path}: the trace holds no routing records")
    if all(r.prompt for r in records):  # replay's hit rate and plan's figures count decoded tokens only
        raise ShardscopeError(f"{path}: the trace holds no decoded tokens, only the prompt pass "
                              "(record it with bench --tokens 2 or more)")
    return RoutingTrace(header, tuple(records))


__all__ = ["TraceHeader", "TraceRecord", "RoutingTrace", "TraceWriter", "read_trace", "open_trace_file"]
