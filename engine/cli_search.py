"""Subcommands that search or extrapolate: sweep, tune, plan (filled in by issue 4)."""

from __future__ import annotations


def register(sub) -> None:
    """Add the search subcommands to the ``shardscope`` parser."""
