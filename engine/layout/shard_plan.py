"""Shard plan: which byte ranges of the file load and evict together.

A shard is the unit of loading, eviction and accounting. It holds consecutive whole
layers up to ``shard_mb``, or a slice of one layer when the layer alone is larger.
Only the big matrices stream: norms and other small tensors stay resident with the
globals, because llama.cpp touches a layer's norm weight *before* the eval callback
can wait for the layer — an evicted norm would fault in up to 8 MiB of readahead.
Ranges are rounded inward to whole pages so evicting one shard never drops a page
that a resident neighbour shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.memory_calls import PAGE, page_inward
from shardscope.engine.base.units import MIB
from shardscope.engine.layout.gguf_layout import ModelLayout
from shardscope.engine.layout.moe_layout import EXPERT_TENSORS

# Tensors smaller than this stay resident with the globals (norms, biases, scales).
SMALL_TENSOR_BYTES = 256 * 1024


@dataclass(frozen=True)
class Shard:
    index: int
    layers: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...]  # absolute file offsets [start, end), page aligned
    part: int = 0  # slice number when one layer is split over several shards
    n_parts: int = 1
    layer_bytes: tuple[int, ...] = ()  # bytes of each of ``layers`` held here (hit rates count bytes)

    def bytes_of_layer(self, layer: int) -> int:
        """What this shard holds of ``layer``: all of it unless the shard groups several layers."""
        if len(self.layers) == 1:
            return self.n_bytes
        if len(self.layer_bytes) != len(self.layers):  # built without sizes: an even split
            return self.n_bytes // len(self.layers)
        return self.layer_bytes[self.layers.index(layer)]

    @property
    def n_bytes(self) -> int:
        return sum(end - start for start, end in self.ranges)

    @property
    def label(self) -> str:
        if self.n_parts > 1:
            return f"L{self.layers[0]} part {self.part + 1}/{self.n_parts}"
        if len(self.layers) == 1:
            return f"L{self.layers[0]}"
        return f"L{self.layers[0]}-{self.layers[-1]}"


@dataclass(frozen=True)
class ShardPlan:
    model_path: str
    shard_bytes_target: int
    shards: tuple[Shard, ...]
    layer_shards: tuple[tuple[int, ...], ...]  # layer position → shard indices it needs
    layers: tuple[int, ...]  # layer numbers in compute order
    total_bytes: int  # every tensor byte in the file
    streamable_bytes: int
    # Layers llama.cpp copied into GPU memory (n_gpu_layers): their file pages are
    # never touched by compute, so they are evicted once and neither stream nor count.
    offloaded_layers: tuple[int, ...] = ()
    offloaded_ranges: tuple[tuple[int, int], ...] = ()

    @property
    def offloaded_bytes(self) -> int:
        return sum(end - start for start, end in self.offloaded_ranges)

    @property
    def host_bytes(self) -> int:
        """Weight bytes that live in host memory: what the budget is about."""
        return self.total_bytes - self.offloaded_bytes

    @property
    def globals_bytes(self) -> int:
        """Everything that never leaves memory: embeddings, output, norms, page edges."""
        return self.total_bytes - self.streamable_bytes - self.offloaded_bytes

    @property
    def max_shard_bytes(self) -> int:
        return max((s.n_bytes for s in self.shards), default=0)

    def layer_bytes(self, layer_pos: int) -> int:
        return sum(self.shards[i].n_bytes for i in self.layer_shards[layer_pos])

    def shard_of_layer_pos(self, layer_pos: int) -> tuple[int, ...]:
        return self.layer_shards[layer_pos]


def _layer_ranges(layout: ModelLayout, layer: int, skip: frozenset[str] = frozenset(),
                  small: int = SMALL_TENSOR_BYTES) -> list[tuple[int, int]]:
    """Page-aligned ranges of one layer's tensors of ``small`` bytes or more (not those named in
    ``skip``), adjacent ones merged."""
    ranges: list[tuple[int, int]] = []
    for tensor in layout.layer_tensors(layer):
        if tensor.n_bytes < small or tensor.name in skip:
            continue
        inner = page_inward(tensor.offset, tensor.offset + tensor.n_bytes)
        if inner is None:
            continue
        if ranges and ranges[-1][1] == inner[0]:
            ranges[-1] = (ranges[-1][0], inner[1])
        else:
            ranges.append(inner)
    return ranges


def _split(ranges: list[tuple[int, int]], limit: int) -> list[list[tuple[int, int]]]:
    """Cut a layer's ranges into equal consecutive pieces of at most ``limit`` bytes.

    Equal, not greedy: a 32 MB layer with a 31 MB target becomes two 16 MB slices,
    not 31 MB + a 1 MB sliver that costs a whole load round-trip for nothing.
    """
    total = sum(end - start for start, end in ranges)
    n_pieces = -(-total // limit)
    per_piece = -(-total // n_pieces)
    limit = -(-per_piece // PAGE) * PAGE
    pieces: list[list[tuple[int, int]]] = [[]]
    room = limit
    for start, end in ranges:
        while start < end:
            if room < PAGE:
                pieces.append([])
                room = limit
            take = min(end - start, room // PAGE * PAGE)
            pieces[-1].append((start, start + take))
            start += take
            room -= take
    return [p for p in pieces if p]


def plan_shards(layout: ModelLayout, shard_mb: float, gpu_layers: int = 0, skip: frozenset[str] = frozenset(),
                total_bytes: int | None = None, small: int = SMALL_TENSOR_BYTES) -> ShardPlan:
    """Shards over the layers that stay on the host.

    llama.cpp gives the GPU the output layer first, then the last repeating layers:
    n_gpu_layers = N puts the last N − 1 ``blk`` layers there (``i_gpu_start =
    n_layer + 1 − N``; measured on an H200: CUDA buffers of 7/15/23/31 layers for
    N = 8/16/24/32). Those are left out of the shards — compute never reads their
    file pages — and listed as offloaded. (The output matrix stays counted with the
    globals: a tied embedding is still read on the host.)
    """
    if not shard_mb or shard_mb <= 0:
        raise ShardscopeError(f"shard size must be > 0 MB, got {shard_mb}")
    target = max(PAGE, int(shard_mb * MIB) // PAGE * PAGE)
    layers = tuple(layout.layer_indices)
    n_offloaded = max(0, min(gpu_layers - 1, len(layers)))
    offloaded = layers[len(layers) - n_offloaded:] if n_offloaded else ()
    per_layer = [[] if layer in offloaded else _layer_ranges(layout, layer, skip, small) for layer in layers]
    shards: list[Shard] = []
    layer_shards: list[tuple[int, ...]] = []
    group_layers: list[int] = []
    group_ranges: list[tuple[int, int]] = []
    group_positions: list[int] = []
    group_sizes: list[int] = []

    def close_group() -> None:
        if group_layers:
            idx = len(shards)
            shards.append(Shard(idx, tuple(group_layers), tuple(group_ranges), layer_bytes=tuple(group_sizes)))
            for pos in group_positions:
                layer_shards[pos] = (idx,)
            group_layers.clear()
            group_ranges.clear()
            group_positions.clear()
            group_sizes.clear()

    for pos, (layer, ranges) in enumerate(zip(layers, per_layer)):
        layer_shards.append(())
        size = sum(e - s for s, e in ranges)
        if size == 0:
            continue
        if size > target:
            close_group()
            pieces = _split(ranges, target)
            first = len(shards)
            for part, piece in enumerate(pieces):
                shards.append(Shard(len(shards), (layer,), tuple(piece), part, len(pieces)))
            layer_shards[pos] = tuple(range(first, len(shards)))
            continue
        group_size = sum(e - s for s, e in group_ranges)
        if group_size + size > target:
            close_group()
        group_layers.append(layer)
        group_ranges.extend(ranges)
        group_positions.append(pos)
        group_sizes.append(size)
    close_group()
    streamable = sum(s.n_bytes for s in shards)
    return ShardPlan(
        model_path=layout.path,
        shard_bytes_target=target,
        shards=tuple(shards),
        layer_shards=tuple(layer_shards),
        layers=layers,
        total_bytes=layout.weight_bytes if total_bytes is None else total_bytes,
        streamable_bytes=streamable,
        offloaded_layers=offloaded,
        offloaded_ranges=tuple(r for layer in offloaded for r in _layer_ranges(layout, layer, skip, small)),
    )


def plan_trunk(layout: ModelLayout, moe, shard_mb: float, keep_routers: bool = False) -> ShardPlan:
    """Shards over an MoE file's trunk: each layer's dense matrices (attention or its linear kin,
    latent projections, shared experts, a dense FFN layer), the layer streaming's unit, beside the
    routed experts that the expert cache streams. The plan's bytes are the trunk's (the experts are
    another streamer's), so its globals are the dense bytes no shard holds.

    What stays with the globals is chosen by name, not only by size: norms, biases, residual
    scores and DeepSeek V4's attention hyper-connections (llama.cpp may touch them before the
    layer's hook: the hook fires after ``attn_norm-N`` computed), and with ``keep_routers``
    (speculation on: it reads the next layer's router while this layer computes) the routers;
    otherwise a router streams with its layer (Kimi K3's FP32 routers are 2.4 GB, more than a
    phone's budget holds beside the head).
    The matrices then stream down to TRUNK_SMALL_TENSOR_BYTES, so a latent-MoE trunk of small
    matrices (Kimi K3's shape at test size) streams too."""
    skip = frozenset(t.name for t in layout.tensors if t.layer is not None and (
        _stays_with_globals(t.name) or (keep_routers and t.name.endswith(".ffn_gate_inp.weight"))))
    return plan_shards(layout, shard_mb, skip=skip, total_bytes=moe.dense_bytes, small=TRUNK_SMALL_TENSOR_BYTES)


TRUNK_SMALL_TENSOR_BYTES = 16 * 1024  # four pages: a smaller matrix's page-inward part is mostly edges
# Routed-expert tensors, never a trunk shard's.
_EXPERT_PARTS = tuple(f".{name}.weight" for name in EXPERT_TENSORS)


def _stays_with_globals(name: str) -> bool:
    # ".hc_attn_": DeepSeek V4's hyper-connection mix of the layer's input streams (hc_mixes-N,
    # hc_pre-N) runs before attn_norm-N, so before the hook that would have loaded its shard
    return (name.endswith(_EXPERT_PARTS) or not name.endswith(".weight") or "norm" in name or "score" in name
            or ".hc_attn_" in name)
