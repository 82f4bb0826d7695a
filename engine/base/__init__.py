"""Base: errors, units, finite-number checks, atomic writes, TOML, user dirs, the bundled model,
and the kernel's memory calls (madvise/mincore/fadvise), with the calls that differ between
Linux and macOS in one room (platform_calls). Imports nothing else of the engine.
"""

__all__ = ['errors', 'units', 'finite', 'atomic_write', 'toml_file', 'user_dirs', 'bundled_model', 'file_mapping',
           'platform_calls', 'memory_calls']
