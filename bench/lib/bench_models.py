"""Models the benches run on: the bundled gemma, and synthetic GGUFs kept in the cache."""

from __future__ import annotations

from pathlib import Path

from shardscope.engine.base.bundled_model import bundled_model_path
from shardscope.engine.base.user_dirs import cache_dir
from shardscope.engine.synth.synth import write_synthetic_model


def synthetic_model(size_mb: int) -> str:
    """A synthetic model of ``size_mb`` written once into the cache dir and reused."""
    path = cache_dir() / "bench" / f"synthetic-{size_mb}mb.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_synthetic_model(path, size_mb, seed=7)
    return str(path)


def bundled_model() -> str:
    return str(bundled_model_path())


__all__ = ["synthetic_model", "bundled_model", "Path"]
