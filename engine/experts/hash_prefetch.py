"""Hash-routed layers' experts loaded as soon as the token is known: a prefetch with no guessing.

DeepSeek V4's first ``hash_layer_count`` layers pick their experts by token id: llama.cpp takes
row ``token`` of ``blk.N.ffn_gate_tid2eid`` (I32, ne [n_expert_used, n_vocab]) as the layer's picks
(src/models/deepseek4.cpp). So the picks of those layers are known the moment the token is sampled,
before its decode starts: ``on_token`` reads them from the file's own table (a view of llama.cpp's
mapping, dense bytes the streamer keeps resident) and puts their loads in flight on the streamer's
loader threads, admitted into the expert cache like a speculation's guesses but never wrong, and
the decode waits for them all at the first hash layer (``_wait`` says why). The decode then meets them at
``ffn_moe_topk-N`` as hits.

Counted (decoded tokens only; the prompt pass loads its union at the layer as before):
- ``known``: hash-layer picks known ahead of their layer (each token's k per hash layer);
- ``hidden``: of those, the ones not resident when the token was known and resident, loaded, when
  their layer picked them: the misses the prefetch hid;
- ``late``: prefetched but still loading at the layer (the decode waited for the rest of the read);
- ``tokens`` / ``ready``: decoded tokens, and those whose every hash-layer pick was resident at its
  layer (the share the issue's must-show counts).

A hidden miss still read the disk for this access: as a speculation's guess loaded in time, it is on
time but not a cache hit, so ``after_topk`` moves it from the streamer's hits to its hidden count
(the cache hit rate stays 1 − read ÷ needed, what ``bench --verify`` holds it against).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

import numpy as np

from shardscope.engine.layout.gguf_layout import ModelLayout

TABLE = "ffn_gate_tid2eid.weight"
_I32 = 26  # GGML_TYPE_I32


def hash_tables(layout: ModelLayout) -> dict[int, tuple[int, int, int]]:
    """layer → (file offset, n_vocab, experts per token) of each hash-routed layer's table."""
    out = {}
    for t in layout.tensors:
        if t.name.endswith("." + TABLE) and t.layer is not None and t.ggml_type == _I32 and len(t.shape) == 2:
            k, n_vocab = int(t.shape[0]), int(t.shape[1])
            if t.n_bytes == 4 * k * n_vocab:
                out[t.layer] = (t.offset, n_vocab, k)
    return out


@dataclass
class HashCounters:
    known: int = 0
    hidden: int = 0
    late: int = 0
    tokens: int = 0
    ready: int = 0

    def copy(self) -> "HashCounters":
        return HashCounters(**self.__dict__)


class HashPrefetch:
    """The hash layers' loads for one streamer (engine/experts/expert_streaming.py ExpertStreamer)."""

    def __init__(self, streamer, layout: ModelLayout, load: bool = True):
        self.streamer = streamer
        self.load = load  # False: count only (what was resident anyway), the A/B's control
        self.tables: dict[int, np.ndarray] = {}
        for layer, (offset, n_vocab, k) in hash_tables(layout).items():
            if layer not in streamer.unit_bytes:
                continue
            n_bytes = 4 * n_vocab * k
            span = streamer.mapping.clip(offset, offset + n_bytes)
            if span is None or span[1] - span[0] != n_bytes:
                continue
            raw = np.ctypeslib.as_array((ctypes.c_uint8 * n_bytes).from_address(span[0]))
            self.tables[layer] = raw.view(np.int32).reshape(n_vocab, k).copy()  # resident: no disk read
        self.counters = HashCounters()
        self._ahead: dict[int, tuple[set[int], set[int]]] = {}  # layer → (picks, experts loaded for them)
        self._pending: list = []  # the loads on_token put in flight, waited for at the next topk (_wait)
        self._token_ready = True
        self._last = max(self.tables) if self.tables else -1

    def __bool__(self) -> bool:
        return bool(self.tables)

    def picks(self, layer: int, token: int) -> tuple[int, ...]:
        table = self.tables[layer]
        return tuple(int(e) for e in table[token]) if 0 <= token < len(table) else ()

    def on_token(self, token: int) -> None:
        """``token`` was sampled and is decoded next: its hash layers' misses go in flight now."""
        s = self.streamer
        self._ahead.clear()
        self._token_ready = True
        units = {layer: self.picks(layer, token) for layer in self.tables}
        if not self.load:
            self._ahead = {layer: (set(picks), set()) for layer, picks in units.items()}
            return
        protected = {(layer, e) for layer, picks in units.items() for e in picks}
        futures = []
        with s._state_lock:
            for layer, picks in units.items():
                loaded = set()
                for expert in picks:
                    unit = (layer, expert)
                    if unit in s.cache:
                        continue
                    evicted = s.cache.admit(unit, protected)
                    if evicted is None:  # no room beside what this token still needs: loaded at the layer
                        continue
                    s._evict_units(evicted, check=False)  # the per-token residue check covers them
                    futures.append(s._submit(unit))
                    loaded.add(expert)
                self._ahead[layer] = (set(picks), loaded)
        self._pending = futures

    def _wait(self) -> None:
        """At the first hash layer's topk, every hash layer's prefetched load lands before the decode
        goes on: that layer comes a few ms after the token is sampled, sooner than a read, and the
        layer-by-layer wait this replaces read each layer's misses in turn, where these went out
        together, at the loader threads' depth. Inside the decode, so the token's time holds it (a
        wait in on_token would fall between two tokens' clocks); the streamer's wait, counted as its
        waits at a layer are."""
        futures, self._pending = self._pending, []
        if not futures:
            return
        s = self.streamer
        started = time.perf_counter()
        try:
            for future in futures:
                future.result()
        except OSError as exc:  # the layer's on_topk then ends the run with it, as with its own loads
            s._error = f"{s.moe.path}: loading experts failed ({exc.strerror or exc})"
            return
        with s._lock:
            s.counters.wait_s += time.perf_counter() - started

    def before_topk(self, layer: int, ids) -> int:
        """Layer ``layer`` picked ``ids`` (before the streamer's on_topk): what was ready. Returns the
        misses the prefetch hid (for ``after_topk``)."""
        self._wait()
        ahead = self._ahead.pop(layer, None)
        if ahead is None or layer not in self.tables:
            return 0
        s = self.streamer
        picked = {int(e) for e in np.asarray(ids).ravel()}
        known, loaded = ahead
        with s._lock:
            in_flight = {e for (l, e) in s._in_flight if l == layer}
        with s._state_lock:
            resident = {e for e in picked if (layer, e) in s.cache}
        hidden = len((loaded & picked) - in_flight)
        c = self.counters
        c.known += len(known & picked) if self.load else 0
        c.hidden += hidden
        c.late += len(loaded & picked & in_flight)
        self._token_ready = self._token_ready and picked <= (resident - in_flight)
        if layer == self._last:
            c.tokens += 1
            c.ready += int(self._token_ready)
        return hidden

    def after_topk(self, layer: int, hidden: int) -> None:
        """The streamer counted the hidden misses as hits: they were read, so on time (its hits) but not
        from the cache, as a speculation's guess loaded in time (its spec_hidden, its hit bytes)."""
        if not hidden:
            return
        s = self.streamer
        with s._lock:
            s.counters.spec_hidden += hidden
            s.counters.hit_bytes -= hidden * s.unit_bytes[layer]

    def begin_round(self) -> None:
        self.counters = HashCounters()
        self._ahead.clear()
        self._pending = []

    def figures(self) -> dict:
        """The round's ExpertRunSummary columns (metric_registry: hash_picks_ahead, hash_misses_hidden,
        hash_ready_share)."""
        c = self.counters
        return {"hash_picks_ahead": c.known, "hash_misses_hidden": c.hidden,
                "hash_ready_share": c.ready / c.tokens if c.tokens else float("nan")}


__all__ = ["HashPrefetch", "HashCounters", "hash_tables", "TABLE"]
