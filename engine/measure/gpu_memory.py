"""GPU memory in use, for the figure ``gpu_mb`` (issue #35): what the GPU layers hold.

Read through ggml's backend device registry (libggml): ``ggml_backend_dev_memory`` over the
devices of type GPU or integrated GPU — one call for CUDA, Metal and Vulkan builds alike, so
no vendor library (NVML, Metal's own API) is needed, and a CPU build has no such device: 0.
"""

from __future__ import annotations

import ctypes
import functools
import os

from shardscope.engine.base.units import MIB

# ggml_backend_dev_type (ggml-backend.h): GPU and integrated GPU (Apple's Metal device is a GPU)
_DEV_GPU, _DEV_IGPU = 1, 2


def llama_lib(stem: str):
    """A ggml library shipped beside libllama in llama-cpp-python (None when absent)."""
    import llama_cpp

    lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    for suffix in (".so", ".dylib", ".dll"):
        path = os.path.join(lib_dir, f"lib{stem}{suffix}")
        if os.path.exists(path):
            return ctypes.CDLL(path)
    return None


@functools.lru_cache(maxsize=None)
def _device_api():
    lib = llama_lib("ggml")
    if lib is None:
        return None
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, res, args in (("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
                            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
                            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)])):
        func = getattr(lib, name, None)
        if func is None:
            return None
        func.restype, func.argtypes = res, args
    return lib


@functools.lru_cache(maxsize=None)
def gpu_devices() -> tuple[int, ...]:
    """Handles of the registry's GPU devices (empty on a CPU build). The registry is filled
    once, by the first call into it, from the backends compiled into libggml: a fixed list."""
    lib = _device_api()
    if lib is None:
        return ()
    devices = (lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count()))
    return tuple(d for d in devices if lib.ggml_backend_dev_type(d) in (_DEV_GPU, _DEV_IGPU))


def gpu_memory_used_mb() -> float:
    """GPU memory in use now, MiB: total − free summed over the GPU devices; 0.0 without one.

    It is the device's figure (what nvidia-smi shows as used), not this process's alone: on a
    GPU shared with other programs their memory is in it too — measure on an idle GPU.
    """
    lib, devices = _device_api(), gpu_devices()
    if lib is None or not devices:
        return 0.0
    used = 0
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    for dev in devices:
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        used += max(0, total.value - free.value)
    return round(used / MIB, 1)



__all__ = ["llama_lib", "gpu_devices", "gpu_memory_used_mb"]
