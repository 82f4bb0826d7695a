"""Reading a ggml graph node's data from inside llama.cpp's eval callback.

The callback hands over a ``struct ggml_tensor *``; its shape and strides sit at fixed offsets
(read directly, no FFI call), its data pointer and name come from libggml-base. Copies are
returned: llama.cpp reuses the buffers for the next node. A node computed on a GPU (layers
offloaded with n_gpu_layers, issue #35) has its data in device memory, where its pointer
cannot be read: there the bytes come through ``ggml_backend_tensor_get`` (one small copy).
"""

from __future__ import annotations

import ctypes
import os

import llama_cpp
import numpy as np

from shardscope.engine.base.errors import ShardscopeError

# struct ggml_tensor: enum type (4 B + 4 padding), buffer pointer, int64 ne[4], size_t nb[4]
_BUFFER_OFFSET, _NE_OFFSET, _NB_OFFSET = 8, 16, 48


def load_ggml_base():
    lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll"):
        path = os.path.join(lib_dir, name)
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            lib.ggml_get_name.argtypes = [ctypes.c_void_p]
            lib.ggml_get_name.restype = ctypes.c_char_p
            lib.ggml_get_data.argtypes = [ctypes.c_void_p]
            lib.ggml_get_data.restype = ctypes.c_void_p
            lib.ggml_backend_buffer_is_host.argtypes = [ctypes.c_void_p]
            lib.ggml_backend_buffer_is_host.restype = ctypes.c_bool
            lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
            lib.ggml_backend_tensor_get.restype = None
            return lib
    raise ShardscopeError(f"cannot find libggml-base in {lib_dir}: llama-cpp-python install is incomplete")


def _load_ggml_get_name():
    return load_ggml_base().ggml_get_name


def _on_host(lib, tensor) -> bool:
    """True when the node's data is in host memory (no buffer yet counts as host: CPU graphs)."""
    buffer = ctypes.c_void_p.from_address(tensor + _BUFFER_OFFSET).value
    return not buffer or bool(lib.ggml_backend_buffer_is_host(buffer))


def _bytes_at(lib, tensor, offset: int, size: int, ctype):
    """``size`` bytes of the node from ``offset`` as a ctypes array of ``ctype``: a view where the
    data is in host memory, else a copy out of device memory (ggml_backend_tensor_get)."""
    count = size // ctypes.sizeof(ctype)
    if _on_host(lib, tensor):
        return (ctype * count).from_address(lib.ggml_get_data(tensor) + offset)
    out = (ctype * count)()
    lib.ggml_backend_tensor_get(tensor, out, offset, size)
    return out


def read_last_row_f32(lib, tensor) -> np.ndarray:
    """The last token's row of an F32 activation [n, n_tokens] (a copy: the buffer is reused)."""
    ne = (ctypes.c_int64 * 4).from_address(tensor + _NE_OFFSET)
    nb = (ctypes.c_size_t * 4).from_address(tensor + _NB_OFFSET)
    n, n_tokens = int(ne[0]), int(ne[1])
    row = _bytes_at(lib, tensor, nb[1] * (n_tokens - 1), n * 4, ctypes.c_float)
    return np.ctypeslib.as_array(row).copy()


def read_topk_ids(lib, tensor) -> np.ndarray:
    """The expert ids of a ``ffn_moe_topk`` node: shape (n_tokens, n_expert_used).

    The node is a view of the full argsort, so rows are ``nb[1]`` bytes apart, not packed.
    """
    ne = (ctypes.c_int64 * 4).from_address(tensor + _NE_OFFSET)
    nb = (ctypes.c_size_t * 4).from_address(tensor + _NB_OFFSET)
    k, n_tokens = int(ne[0]), int(ne[1])
    if n_tokens == 1:  # a decoded token: one packed row
        return np.frombuffer(_bytes_at(lib, tensor, 0, k * 4, ctypes.c_int32), dtype=np.int32).reshape(1, k).copy()
    span = nb[1] * (n_tokens - 1) + k * 4  # the view's bytes, gaps included (ggml_nbytes)
    rows = np.ctypeslib.as_array(_bytes_at(lib, tensor, 0, span, ctypes.c_int32))
    return np.lib.stride_tricks.as_strided(rows, shape=(n_tokens, k), strides=(nb[1], nb[0])).copy()
