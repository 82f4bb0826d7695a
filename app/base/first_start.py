"""Which profile the window opens with: a newcomer's first Run should show streaming.

On first start (no saved state) the window loads the built-in "Streaming demo"
(profiles/streaming-demo.toml): the bundled model under a budget below its weights,
so pressing Run reads from the SSD at once. The projection device stays the iPhone
16 Pro: the demo profile names it. Later starts reopen the profile the user last had.
Pure, so the rule is tested without a window.
"""

from __future__ import annotations

from typing import Iterable

FIRST_START_PROFILE = "Streaming demo"
# What a saved profile that no longer exists opens, "iPhone 16 Pro" (this one's old name) included.
FALLBACK_PROFILE = "iPhone 16 Pro, tuned"
PROJECTION_DEVICE = "iphone-16-pro"


def startup_profile(requested: str | None, last_saved: str | None, available: Iterable[str]) -> str | None:
    """The profile to load: the one asked for, else the last one saved, else (first start)
    the streaming demo; a name that is not ``available`` falls back to the iPhone profile.
    None when not even that exists (the window then keeps its defaults)."""
    names = set(available)
    if requested:
        wanted = requested
    elif last_saved:
        wanted = last_saved
    else:
        wanted = FIRST_START_PROFILE
    for name in (wanted, FALLBACK_PROFILE):
        if name in names:
            return name
    return None
