"""The residency controller streaming with no llama.cpp in the process: a diagnostic.

Why: streaming efficiency mixes two things — how well the controller keeps the disk
busy, and how much llama.cpp's compute on the same two cores slows the I/O path.
Here the controller runs exactly as in a run (same plan, budget, policy, threads for
loading, mapping and eviction, a read-only shared mapping opened the way llama.cpp
opens it), but each layer's compute is a sleep of the per-layer time measured in the
real run. What it streams, against the same disk bound, is the controller's own
ceiling on this machine.
"""

from __future__ import annotations

import mmap
import os
import time

import numpy as np

from bench.lib.cold_cache import drop_from_cache
from shardscope.engine.base import memory_calls
from shardscope.engine.base.units import MB_S
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.layout.shard_plan import plan_shards
from shardscope.engine.stream.residency import ResidencyController


def controller_alone_mb_s(model: str, budget_mb: int, depth: int, shard_mb: int, policy: str,
                          layer_compute_s: float, tokens: int = 8) -> float:
    """10^6 B/s the controller streams with sleeps in place of compute (steady state)."""
    plan = plan_shards(load_layout(model), shard_mb)
    drop_from_cache(model)
    fd = os.open(model, os.O_RDONLY)
    map_fd = os.open(model, os.O_RDONLY)
    os.posix_fadvise(map_fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # as llama.cpp opens the model
    mapped = mmap.mmap(map_fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    os.close(map_fd)
    view = np.frombuffer(mapped, dtype=np.uint8)
    controller = None
    try:
        memory_calls.populate(view.ctypes.data, view.ctypes.data + view.size)  # llama.cpp's load reads it all
        mapping = memory_calls.find_mapping(model)
        controller = ResidencyController(plan, mapping, fd, budget_mb, depth, policy)
        controller.start()
        n_layers = len(plan.layer_shards)
        for _ in range(2):  # warm-up tokens: the cold start's loads are not steady state
            for layer in range(n_layers):
                controller.on_layer(layer)
                time.sleep(layer_compute_s)
        before = controller.snapshot().counters.loaded_bytes
        start = time.perf_counter()
        for _ in range(tokens):
            for layer in range(n_layers):
                controller.on_layer(layer)
                time.sleep(layer_compute_s)
        elapsed = time.perf_counter() - start
        return (controller.snapshot().counters.loaded_bytes - before) / MB_S / elapsed
    finally:
        if controller is not None:
            controller.close()
        del view
        mapped.close()
        os.close(fd)
