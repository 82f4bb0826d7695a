"""The loader's way to the disk: exactly a shard's bytes into the page cache, nothing past them.

Why not plain reads: the kernel's readahead (read_ahead_kb is 8 MiB on this machine's
disk) pulled the next shards in behind every load, unaccounted, so resident weights
rose past budget + one shard (issue #10 item 5; docs/decisions.md has the figures).
So the descriptor is the loader's own, marked POSIX_FADV_RANDOM (no readahead on
it), and each range is asked for with POSIX_FADV_WILLNEED first — the reads go out
together at full queue depth — then sendfile to /dev/null waits for them.
"""

from __future__ import annotations

import os

from shardscope.engine.base import memory_calls, platform_calls
from shardscope.engine.base.units import MIB

WILLNEED_CHUNK = 2 * MIB  # the kernel clips one WILLNEED to its readahead size; keep under it


class ExactReader:
    def __init__(self, fd: int, path: str):
        if not hasattr(os, "posix_fadvise"):  # macOS: no fadvise, so no exact page-cache reads
            raise OSError(95, "no posix_fadvise on this system")
        # A new open file description: the readahead mode must not change llama.cpp's or the guard's.
        self.fd = platform_calls.reopen(fd, path)
        try:
            os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)
            self._cache = memory_calls.CacheReader(self.fd)
        except OSError:
            os.close(self.fd)
            raise

    def ask(self, file_start: int, file_end: int) -> None:
        """Start reading [file_start, file_end) without waiting (so several ranges queue together)."""
        for lo in range(file_start, file_end, WILLNEED_CHUNK):
            os.posix_fadvise(self.fd, lo, min(WILLNEED_CHUNK, file_end - lo), os.POSIX_FADV_WILLNEED)

    def read(self, file_start: int, file_end: int, asked: bool = False) -> None:
        """Bring [file_start, file_end) into the page cache (blocking), and only that."""
        if not asked:
            self.ask(file_start, file_end)
        self._cache.read(file_start, file_end)

    def close(self) -> None:
        if self.fd >= 0:
            self._cache.close()
            os.close(self.fd)
            self.fd = -1
