"""What the window needs to know about a model before any run: is it a GGUF, its shards.

Opening a file answers "not a GGUF" at once instead of at the next Run, and fills
the shard map and the budget slider's range. Only the header is read (cached by
path, size and mtime), never the weights, and the budget is not checked here: a
model too big for the current budget is still worth opening.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shardscope.engine.base.bundled_model import resolve_model_path
from shardscope.engine.base.units import MIB
from shardscope.engine.layout.layout_cache import load_layout
from shardscope.engine.layout.moe_layout import MoeLayout, read_moe_layout
from shardscope.engine.layout.shard_plan import ShardPlan, plan_shards


@dataclass(frozen=True)
class ModelInfo:
    requested: str | None  # None = the bundled model
    path: str  # resolved file path
    plan: ShardPlan
    file_mb: float
    moe: MoeLayout | None = None  # routed experts (the expert panel shows), None for dense

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def total_mb(self) -> float:
        return self.plan.total_bytes / MIB

    @property
    def n_layers(self) -> int:
        return len(self.plan.layers)


def probe_model(model_path: str | None, shard_mb: int) -> ModelInfo:
    """Raises ShardscopeError naming the file (missing, not a GGUF, corrupt header)."""
    path = resolve_model_path(model_path)
    layout = load_layout(path)
    plan = plan_shards(layout, shard_mb)
    return ModelInfo(model_path, path, plan, os.path.getsize(path) / MIB, read_moe_layout(layout))
