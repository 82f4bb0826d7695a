"""Which I/O path a streamed run takes, said once: own slots by mremap (Linux's default), own slots
by the portable POSIX path (where mremap is missing — macOS —, and on Linux with
``SHARDSCOPE_IO=portable``), or the page cache (no own slots: a model loaded while it fit, or a
file that takes no uncached reads). The run line, the CSV's ``io_path`` column and the window's
engine summary show the answer (engine/measure/metric_registry.py).
"""

from __future__ import annotations

import os

from shardscope.engine.base import platform_calls
from shardscope.engine.base.errors import ShardscopeError

ENV = "SHARDSCOPE_IO"
MREMAP, PORTABLE, PAGE_CACHE = "mremap", "portable", "page cache"
CHOICES = (MREMAP, PORTABLE)


def wanted() -> str:
    """The own-slot path this process asks for: $SHARDSCOPE_IO, else mremap where it exists."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return MREMAP if platform_calls.has_mremap() else PORTABLE
    if value not in CHOICES:
        raise ShardscopeError(f"{ENV}={os.environ[ENV]!r}: not an I/O path (use {' or '.join(CHOICES)})")
    if value == MREMAP and not platform_calls.has_mremap():
        raise ShardscopeError(f"{ENV}=mremap: this system has no mremap (use portable)")
    return value


def open_slots(path: str, mapping):
    """Own slots of the wanted path for ``mapping`` of ``path``, or why not (a string: the run then
    streams through the page cache and says so)."""
    if wanted() == PORTABLE:
        from shardscope.engine.stream.portable_slots import PortableSlots

        return PortableSlots.probe(path, mapping)
    from shardscope.engine.stream.direct_slots import DirectSlots

    return DirectSlots.probe(path, mapping)


def path_of(slots) -> str:
    """The I/O path a run with these slots (None: the page cache) takes."""
    return getattr(slots, "io_path", PAGE_CACHE) if slots is not None else PAGE_CACHE


__all__ = ["ENV", "MREMAP", "PORTABLE", "PAGE_CACHE", "CHOICES", "wanted", "open_slots", "path_of"]
