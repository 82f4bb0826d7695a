"""Where every tensor of a GGUF file lives, read from the header alone.

Why our own header parser instead of ``gguf.GGUFReader``: the reader materialises every
metadata array (7.7 s on gemma's 262k-token vocabulary) and trusts the counts in the
header, so a corrupt file can make it allocate or loop for ever. Streaming only needs
names, types, shapes and offsets; this parser skips metadata values by size, bounds
every count by the bytes actually in the file, and turns every defect into one
``ShardscopeError`` that names the file.
"""

from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from shardscope.engine.base.errors import ShardscopeError

GGUF_MAGIC = b"GGUF"
_LAYER_RE = re.compile(r"^blk\.(\d+)\.")

# GGUF metadata value types → fixed byte size (strings and arrays handled apart).
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# Metadata we keep (small scalars/strings); everything else is skipped by size.
_KEEP_SUFFIXES = (
    "general.architecture", "general.name", "general.alignment", ".block_count",
    ".expert_count", ".expert_used_count", ".context_length", ".embedding_length",
    # the MoE shape of deepseek2 (Kimi) files, and the keys whose absence aborts llama.cpp
    ".expert_shared_count", ".leading_dense_block_count", ".expert_gating_func", ".expert_weights_norm",
    ".expert_weights_scale", ".rope.dimension_count", ".attention.key_length_mla",
)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ggml_type: int
    shape: tuple[int, ...]
    offset: int  # absolute file offset of the first byte
    n_bytes: int

    @property
    def layer(self) -> int | None:
        match = _LAYER_RE.match(self.name)
        return int(match.group(1)) if match else None


@dataclass(frozen=True)
class ModelLayout:
    """The byte layout of one GGUF file; layers are in numeric order, not file order."""

    path: str
    file_size: int
    mtime_ns: int
    version: int
    alignment: int
    data_offset: int
    tensors: tuple[TensorInfo, ...]
    metadata: dict = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", "unknown"))

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name", Path(self.path).stem))

    @property
    def layer_indices(self) -> list[int]:
        return sorted({t.layer for t in self.tensors if t.layer is not None})

    @property
    def n_layers(self) -> int:
        return len(self.layer_indices)

    def layer_tensors(self, layer: int) -> list[TensorInfo]:
        return sorted((t for t in self.tensors if t.layer == layer), key=lambda t: t.offset)

    @property
    def global_tensors(self) -> list[TensorInfo]:
        return [t for t in self.tensors if t.layer is None]

    @property
    def weight_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)


class _Cursor:
    """Bounds-checked reads over the header bytes: a short read is a clear error."""

    def __init__(self, handle, path: str, file_size: int):
        self.handle = handle
        self.path = path
        self.file_size = file_size
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > self.file_size:
            raise ShardscopeError(
                f"{self.path}: truncated GGUF header ({what} at byte {self.pos} "
                f"needs {n} bytes, file has {self.file_size})"
            )
        data = self.handle.read(n)
        if len(data) != n:
            raise ShardscopeError(f"{self.path}: file shrank while reading its header")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.file_size:
            raise ShardscopeError(
                f"{self.path}: truncated GGUF header ({what} at byte {self.pos} "
                f"claims {n} bytes, file has {self.file_size})"
            )
        self.handle.seek(n, os.SEEK_CUR)
        self.pos += n

    def u32(self, what: str) -> int:
        return struct.unpack("<I", self.take(4, what))[0]

    def u64(self, what: str) -> int:
        return struct.unpack("<Q", self.take(8, what))[0]

    def string(self, what: str) -> str:
        length = self.u64(what + " length")
        raw = self.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ShardscopeError(f"{self.path}: {what} is not valid UTF-8 at byte {self.pos - length}") from None


def _read_value(cur: _Cursor, vtype: int, key: str, keep: bool):
    if vtype in _SCALAR_SIZES:
        raw = cur.take(_SCALAR_SIZES[vtype], f"value of {key}")
        fmt = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
               10: "<Q", 11: "<q", 12: "<d"}[vtype]
        return struct.unpack(fmt, raw)[0]
    if vtype == _STRING:
        if keep:
            return cur.string(f"value of {key}")
        cur.skip(cur.u64(f"length of {key}"), f"value of {key}")
        return None
    if vtype == _ARRAY:
        item_type = cur.u32(f"array type of {key}")
        count = cur.u64(f"array length of {key}")
        if count > cur.file_size:
            raise ShardscopeError(f"{cur.path}: metadata array {key} claims {count} items, more than the file holds")
        if item_type in _SCALAR_SIZES:
            cur.skip(count * _SCALAR_SIZES[item_type], f"array {key}")
        elif item_type == _STRING:
            for _ in range(count):
                cur.skip(cur.u64(f"string in {key}"), f"string in {key}")
        else:
            raise ShardscopeError(f"{cur.path}: metadata array {key} has unsupported item type {item_type}")
        return None
    raise ShardscopeError(f"{cur.path}: metadata key {key} has unknown value type {vtype}")


def _tensor_bytes(path: str, name: str, ggml_type: int, shape: tuple[int, ...]) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise ShardscopeError(f"{path}: tensor {name} has unknown ggml type {ggml_type}") from None
    n_elems = math.prod(shape)
    if shape and shape[0] % block:
        raise ShardscopeError(f"{path}: tensor {name} row of {shape[0]} is not a multiple of block {block}")
    return n_elems // block * type_size


def read_layout(path: str | os.PathLike) -> ModelLayout:
    """Parse the header and tensor table; check every tensor lies inside the file."""
    path = str(path)
    p = Path(path)
    if not p.exists():
        raise ShardscopeError(f"{path}: no such file")
    if p.is_dir():
        raise ShardscopeError(f"{path}: is a directory, not a GGUF file")
    try:
        stat = p.stat()
        handle = open(p, "rb")
    except PermissionError:
        raise ShardscopeError(f"{path}: permission denied (cannot read the model file)") from None
    except OSError as exc:
        raise ShardscopeError(f"{path}: cannot open ({exc.strerror})") from None
    with handle:
        size = stat.st_size
        if size == 0:
            raise ShardscopeError(f"{path}: empty file, not a GGUF model")
        cur = _Cursor(handle, path, size)
        magic = handle.read(4)
        cur.pos = len(magic)
        if magic != GGUF_MAGIC:
            raise ShardscopeError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
        version = cur.u32("version")
        if version not in (2, 3):
            raise ShardscopeError(f"{path}: unsupported GGUF version {version} (expected 2 or 3)")
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        # Each tensor info needs ≥ 24 bytes and each key/value ≥ 12: bound counts by the file.
        if n_tensors * 24 > size or n_kv * 12 > size:
            raise ShardscopeError(
                f"{path}: truncated or corrupt GGUF header: it claims {n_tensors} tensors and {n_kv} metadata keys, "
                f"impossible in a {size}-byte file"
            )
        metadata: dict = {}
        for _ in range(n_kv):
            key = cur.string("metadata key")
            vtype = cur.u32(f"type of {key}")
            keep = key.endswith(_KEEP_SUFFIXES)
            value = _read_value(cur, vtype, key, keep)
            if keep and value is not None:
                metadata[key] = value
        infos = []
        for i in range(n_tensors):
            name = cur.string(f"name of tensor {i}")
            n_dims = cur.u32(f"dims of {name}")
            if not 1 <= n_dims <= 8:
                raise ShardscopeError(f"{path}: tensor {name} has {n_dims} dimensions")
            shape = tuple(cur.u64(f"shape of {name}") for _ in range(n_dims))
            if any(d == 0 or d > 2**40 for d in shape):
                raise ShardscopeError(f"{path}: tensor {name} has an impossible shape {shape}")
            ggml_type = cur.u32(f"type of {name}")
            rel = cur.u64(f"offset of {name}")
            infos.append((name, ggml_type, shape, rel))
        alignment = int(metadata.get("general.alignment", 32))
        if alignment <= 0 or alignment & (alignment - 1):
            raise ShardscopeError(f"{path}: general.alignment {alignment} is not a power of two")
        data_offset = (cur.pos + alignment - 1) // alignment * alignment
        tensors = []
        for name, ggml_type, shape, rel in infos:
            n_bytes = _tensor_bytes(path, name, ggml_type, shape)
            offset = data_offset + rel
            if offset + n_bytes > size:
                raise ShardscopeError(
                    f"{path}: tensor data is cut short ({name} ends at byte {offset + n_bytes}, "
                    f"file has {size}); the download or copy is incomplete"
                )
            tensors.append(TensorInfo(name, ggml_type, shape, offset, n_bytes))
    if not tensors:
        raise ShardscopeError(f"{path}: GGUF file holds no tensors")
    return ModelLayout(path=str(p.resolve()), file_size=size, mtime_ns=stat.st_mtime_ns,
                       version=version, alignment=alignment, data_offset=data_offset,
                       tensors=tuple(tensors), metadata=metadata)
