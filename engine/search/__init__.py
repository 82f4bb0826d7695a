"""Search: llama-bench-style sweeps over knob grids and the device auto-tune.
"""

__all__ = ['sweep', 'tune']
