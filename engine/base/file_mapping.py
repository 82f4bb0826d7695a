"""Where llama.cpp mapped the model file in this process: one small value both the kernel calls
(memory_calls.py) and the platform room (platform_calls.py) speak in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileMapping:
    """Where llama.cpp mapped the model: address of file offset X = base + X."""

    path: str
    start: int
    end: int
    file_offset: int

    @property
    def base(self) -> int:
        return self.start - self.file_offset

    def address(self, file_offset: int) -> int:
        return self.base + file_offset

    def clip(self, start: int, end: int) -> tuple[int, int] | None:
        """File range → address range inside the mapping (None if outside)."""
        lo = max(self.address(start), self.start)
        hi = min(self.address(end), self.end)
        return (lo, hi) if hi > lo else None


__all__ = ["FileMapping"]
