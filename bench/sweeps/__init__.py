"""Correctness sweeps: many cases, each checked against a source the engine does not compute."""
