"""Routing traces written by other engines, read as they are into a RoutingTrace.

Three formats, told apart by their first line (docs/trace-formats.md describes each):

- shardscope's own JSON lines (``bench --trace``): routing_trace.read_trace;
- BigMoeOnEdge's ``# route_trace v1`` CSV: one row per (pass, layer, slot), prefill rows
  (phase 0) are the prompt, decode rows (phase 1) the decoded tokens; the bytes of one
  expert per layer come from its ``# layer=N expert_bytes=B dense_bytes=D`` lines, and so do
  the layer's dense bytes (what ``size --trace`` sizes the model from);
- a plain CSV any engine can write: a header ``token,layer,expert[,weight][,prompt]``, one
  row per pick, and ``# expert_bytes=B`` (every layer) or ``# layer=N expert_bytes=B`` lines.

A prompt pass becomes one record per layer holding the union of its tokens' picks and how
many tokens picked each (what the live run loads before the first decoded token); every
decoded (token, layer) becomes one record with its picks in router order and their weights.
A defect is one ShardscopeError naming the file, the line and what is wrong.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord, open_trace_file, read_trace

ROUTE_TRACE_V1 = "# route_trace v1"
ROUTE_TRACE_COLUMNS = ("turn", "phase", "step", "layer", "slot", "expert", "weight", "residency", "expert_bytes")
_PHASE_WORDS = {"prefill": "0", "prompt": "0", "decode": "1"}
ROUTE_TRACE_REQUIRED = ("turn", "phase", "step", "layer", "expert")  # the rest are optional, found by name
PLAIN_REQUIRED = ("token", "layer", "expert")
PLAIN_OPTIONAL = ("weight", "prompt")


def load_trace(path: str | os.PathLike) -> RoutingTrace:
    """Any supported routing trace file, its format detected from the first line (a .jsonl or
    .json name is shardscope's own)."""
    path = Path(path)
    if path.suffix in (".jsonl", ".json"):  # what bench --trace writes: its own reader's messages
        return read_trace(path)
    first = _first_line(path)
    if first.startswith("{"):
        return read_trace(path)
    if first.strip() == ROUTE_TRACE_V1:
        return _read_csv(path, _RouteTraceV1(path))
    columns = [c.strip().lower() for c in first.split(",")]
    if first.startswith("#") or columns[:3] == list(PLAIN_REQUIRED):
        return _read_csv(path, _PlainCsv(path))
    raise ShardscopeError(
        f"{path} line 1: not a routing trace format shardscope knows (a shardscope JSON-lines trace, "
        f"BigMoeOnEdge's '{ROUTE_TRACE_V1}' CSV, or a CSV with the header 'token,layer,expert[,weight][,prompt]'; "
        "see docs/trace-formats.md)")


def _first_line(path: Path) -> str:
    try:
        with open_trace_file(path) as handle:
            for line in handle:
                if line.strip():
                    return line.rstrip("\n")
    except UnicodeDecodeError:
        raise ShardscopeError(f"{path}: not a text file, so not a routing trace") from None
    raise ShardscopeError(f"{path}: empty file, not a routing trace")


# ---------------------------------------------------------------- passes → records
@dataclass
class _Passes:
    """Rows gathered into passes: a prompt pass (union per layer, in layer order) or one
    decoded token's layers (in the order they ran)."""
    records: list[TraceRecord] = field(default_factory=list)
    _prompt: dict[int, dict[int, int]] = field(default_factory=dict)  # layer → expert → tokens
    _prompt_token: int = 0
    _key: tuple | None = None  # (token, layer) of the decode record being filled
    _picks: list[int] = field(default_factory=list)
    _weights: list[float] = field(default_factory=list)

    def prompt_pick(self, token: int, layer: int, expert: int) -> None:
        self._flush_decode()
        if not self._prompt:
            self._prompt_token = token
        bank = self._prompt.setdefault(layer, {})
        bank[expert] = bank.get(expert, 0) + 1

    def decode_pick(self, token: int, layer: int, expert: int, weight: float | None, where: str) -> None:
        self._flush_prompt()
        if self._key != (token, layer):
            self._flush_decode()
            self._key = (token, layer)
        if expert in self._picks:
            raise ShardscopeError(f"{where}: expert {expert} picked twice by token {token} in layer {layer}")
        self._picks.append(expert)
        if weight is not None:
            self._weights.append(weight)

    def finish(self) -> list[TraceRecord]:
        self._flush_prompt()
        self._flush_decode()
        return self.records

    def _flush_prompt(self) -> None:
        for layer in sorted(self._prompt):
            bank = self._prompt[layer]
            self.records.append(TraceRecord(self._prompt_token, layer, tuple(bank), tuple(bank.values()), True))
        self._prompt = {}

    def _flush_decode(self) -> None:
        if self._key is not None:
            weights = tuple(self._weights) if len(self._weights) == len(self._picks) else ()
            self.records.append(TraceRecord(self._key[0], self._key[1], tuple(self._picks), weights=weights))
        self._key, self._picks, self._weights = None, [], []


# ---------------------------------------------------------------- the two CSV dialects
class _CsvDialect:
    """What differs between the CSV formats: comment lines, the header row, a data row."""

    def __init__(self, path: Path):
        self.path = path
        self.model = ""
        self.n_expert: int | None = None
        self.n_expert_used: int | None = None
        self.unit_bytes: dict[int, int] = {}
        self.every_layer_bytes: int | None = None
        self.dense_bytes: dict[int, int] = {}  # '# layer=N ... dense_bytes=B'
        self.every_layer_dense: int | None = None  # '# dense_bytes=B' (plain CSV: every layer)
        self.columns: list[str] | None = None

    def comment(self, text: str, where: str) -> None:
        fields = _key_values(text)
        if "layer" in fields:
            if "expert_bytes" not in fields:
                raise ShardscopeError(f"{where}: a '# layer=' line needs expert_bytes=")
            layer = _whole(fields["layer"], "layer", where)
            self.unit_bytes[layer] = _whole(fields["expert_bytes"], "expert_bytes", where, 1)
            if "dense_bytes" in fields:
                self.dense_bytes[layer] = _whole(fields["dense_bytes"], "dense_bytes", where)
            return
        if "expert_bytes" in fields:
            self.every_layer_bytes = _whole(fields["expert_bytes"], "expert_bytes", where, 1)
        if "dense_bytes" in fields:
            self.every_layer_dense = _whole(fields["dense_bytes"], "dense_bytes", where)
        if "model" in fields:
            self.model = fields["model"]
        if "n_expert" in fields:
            self.n_expert = _whole(fields["n_expert"], "n_expert", where, 1)
        if "n_expert_used" in fields:
            self.n_expert_used = _whole(fields["n_expert_used"], "n_expert_used", where, 1)

    def header(self, cells: list[str], where: str) -> None:
        raise NotImplementedError

    def row(self, cells: list[str], passes: _Passes, where: str) -> tuple[int, int]:
        """Adds the row's pick to ``passes``; returns (layer, expert) for the header checks."""
        raise NotImplementedError

    def sizes(self, layers: set[int], where: str) -> dict[int, int]:
        sizes = dict(self.unit_bytes)
        for layer in sorted(layers):
            if layer not in sizes:
                if self.every_layer_bytes is None:
                    raise ShardscopeError(f"{where}: layer {layer} has no expert size (add a "
                                          f"'# layer={layer} expert_bytes=N' or '# expert_bytes=N' line)")
                sizes[layer] = self.every_layer_bytes
        return sizes

    def dense(self, layers) -> dict[int, int]:
        """Each layer's dense bytes where the header gives them (none when it gives none)."""
        out = {layer: self.dense_bytes.get(layer, self.every_layer_dense) for layer in sorted(layers)}
        return {layer: b for layer, b in out.items() if b is not None}


class _RouteTraceV1(_CsvDialect):
    """Columns are found by name, so a later version's extra columns are read past; the
    required ones are ``ROUTE_TRACE_REQUIRED``. A (turn, step) pair becomes one running token
    number: a second turn's steps may start again at 0, and its tokens still come after the
    first turn's. A layer without a ``# layer=`` line takes its expert size from the rows'
    ``expert_bytes`` (the first one above 0)."""

    def __init__(self, path: Path):
        super().__init__(path)
        self._tokens: dict[tuple[int, int], int] = {}
        self._row_bytes: dict[int, int] = {}
        self._at: dict[str, int] = {}

    def header(self, cells, where):
        names = [c.strip().lower() for c in cells]
        missing = [n for n in ROUTE_TRACE_REQUIRED if n not in names]
        if missing or len(set(names)) != len(names):
            raise ShardscopeError(f"{where}: expected the column header '{','.join(ROUTE_TRACE_COLUMNS)}'"
                                  + (f" (missing {', '.join(missing)})" if missing else " (a column named twice)"))
        self.columns = names
        self._at = {n: i for i, n in enumerate(names)}

    def row(self, cells, passes, where):
        if len(cells) != len(self.columns):
            raise ShardscopeError(f"{where}: {len(cells)} fields, expected {len(self.columns)}")
        turn = _whole(cells[self._at["turn"]], "turn", where)
        phase_text = cells[self._at["phase"]].strip().lower()
        phase = _whole(_PHASE_WORDS.get(phase_text, phase_text), "phase", where)  # "prefill"/"decode" as 0/1
        step, layer, expert = (_whole(cells[self._at[n]], n, where) for n in ("step", "layer", "expert"))
        weight = _number(cells[self._at["weight"]], "weight", where) if "weight" in self._at else None
        if "expert_bytes" in self._at and layer not in self._row_bytes:
            n_bytes = _whole(cells[self._at["expert_bytes"]], "expert_bytes", where)
            if n_bytes > 0:  # prefill rows of some traces carry 0
                self._row_bytes[layer] = n_bytes
        if phase not in (0, 1):
            raise ShardscopeError(f"{where}: phase must be 0 (prefill) or 1 (decode), got {phase}")
        token = self._tokens.setdefault((turn, step), len(self._tokens))
        if phase == 0:
            passes.prompt_pick(token, layer, expert)  # a new turn's prefill rows open a new prompt pass
        else:
            passes.decode_pick(token, layer, expert, weight, where)
        return layer, expert

    def sizes(self, layers, where):
        for layer in layers:
            if layer not in self.unit_bytes and layer in self._row_bytes:
                self.unit_bytes[layer] = self._row_bytes[layer]
        return super().sizes(layers, where)


class _PlainCsv(_CsvDialect):
    def header(self, cells, where):
        names = [c.strip().lower() for c in cells]
        if names[:3] != list(PLAIN_REQUIRED) or any(n not in PLAIN_OPTIONAL for n in names[3:]) \
                or len(set(names)) != len(names):
            raise ShardscopeError(f"{where}: expected the column header 'token,layer,expert[,weight][,prompt]', "
                                  f"got {','.join(names)!r}")
        self.columns = names

    def row(self, cells, passes, where):
        if len(cells) != len(self.columns):
            raise ShardscopeError(f"{where}: {len(cells)} fields, expected {len(self.columns)} "
                                  f"({','.join(self.columns)})")
        values = dict(zip(self.columns, (c.strip() for c in cells)))
        token, layer, expert = (_whole(values[n], n, where) for n in PLAIN_REQUIRED)
        weight = _number(values["weight"], "weight", where) if "weight" in values else None
        prompt = values.get("prompt", "0").lower()
        if prompt not in ("0", "1", "true", "false"):
            raise ShardscopeError(f"{where}: 'prompt' must be 0, 1, true or false, got {values['prompt']!r}")
        if prompt in ("1", "true"):
            passes.prompt_pick(token, layer, expert)
        else:
            passes.decode_pick(token, layer, expert, weight, where)
        return layer, expert


def _read_csv(path: Path, dialect: _CsvDialect) -> RoutingTrace:
    passes = _Passes()
    layers: set[int] = set()
    top_expert = -1
    line_of_layer: dict[int, str] = {}
    try:
        with open_trace_file(path) as handle:
            for number, line in enumerate(handle, 1):
                text = line.strip()
                where = f"{path} line {number}"
                if not text or text == ROUTE_TRACE_V1:
                    continue
                if text.startswith("#"):
                    dialect.comment(text[1:], where)
                    continue
                cells = text.split(",")
                if dialect.columns is None:
                    dialect.header(cells, where)
                    continue
                layer, expert = dialect.row(cells, passes, where)
                if dialect.n_expert is not None and expert >= dialect.n_expert:
                    raise ShardscopeError(f"{where}: expert {expert} is not below n_expert={dialect.n_expert}")
                layers.add(layer)
                line_of_layer.setdefault(layer, where)
                top_expert = max(top_expert, expert)
    except UnicodeDecodeError:
        raise ShardscopeError(f"{path}: not a text file, so not a routing trace") from None
    except OSError as exc:
        raise ShardscopeError(f"{path}: cannot read ({exc.strerror})") from None
    records = passes.finish()
    if dialect.columns is None:
        raise ShardscopeError(f"{path}: no column header, so no routing rows")
    if not records:
        raise ShardscopeError(f"{path}: the trace holds no routing rows")
    sizes = {}
    for layer in sorted(layers):  # a missing size is named at the layer's first row
        sizes.update(dialect.sizes({layer}, line_of_layer[layer]))
    decoded = [r for r in records if not r.prompt]
    if not decoded:
        raise ShardscopeError(f"{path}: no decoded tokens (every row is a prompt row), nothing to replay")
    used = dialect.n_expert_used or max(len(r.experts) for r in decoded)
    header = TraceHeader(dialect.model, dialect.n_expert or top_expert + 1, used, sizes, dialect.dense(sizes))
    return RoutingTrace(header, tuple(records))


def _key_values(text: str) -> dict[str, str]:
    out = {}
    for part in text.split():
        if "=" not in part:
            continue  # free words in a comment (a note) are allowed
        key, _, value = part.partition("=")
        out[key.strip()] = value.strip()
    return out


def _whole(text: str, name: str, where: str, low: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ShardscopeError(f"{where}: '{name}' must be a whole number, got {text.strip()!r}") from None
    if value < low:
        raise ShardscopeError(f"{where}: '{name}' must be ≥ {low}, got {value}")
    return value


def _number(text: str, name: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ShardscopeError(f"{where}: '{name}' must be a number, got {text.strip()!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ShardscopeError(f"{where}: '{name}' must be a finite number, got {text.strip()!r}")
    return value


__all__ = ["load_trace", "ROUTE_TRACE_V1"]
