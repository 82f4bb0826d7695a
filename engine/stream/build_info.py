"""What llama.cpp says about its build, this machine and a model: the descriptive
fields of a llama-bench row (see engine.output.llama_bench_format).

Build: llama-cpp-python exposes neither ``llama_commit()`` nor ``llama_build_number()``
(they live in llama.cpp's common library, which the package does not ship). The
shipped libggml-base has ``ggml_commit()``, the same ``git rev-parse --short HEAD`` the
build recorded (``0c1e570`` for llama-cpp-python 0.3.36), so that is read first. The
build number is compiled into no shipped library: it is 0, llama.cpp's own value when
unknown. Where ggml_commit() says "unknown" (a build without git), the commit comes
from the package version: llama-cpp-python's CHANGELOG names the llama.cpp commit each
release vendors ("feat: update llama.cpp to ggml-org/llama.cpp@0c1e57098").

Machine: ``cpu_info``, ``gpu_info`` and ``backends`` are computed the way llama-bench
computes them (get_cpu_info, get_gpu_info, test::get_backend), from the ggml backend
registry of the loaded libraries.

Model: ``model_type``, ``model_size`` and ``model_n_params`` are llama.cpp's
``llama_model_desc`` / ``llama_model_size`` / ``llama_model_n_params`` of a load with
``no_alloc`` and no mapping: the header and tensor shapes, not one weight read.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError

# llama-cpp-python release → llama.cpp commit it vendors (its CHANGELOG.md).
VENDORED_COMMITS = {
    "0.3.36": "0c1e57098",
    "0.3.35": "4df29be4f",
    "0.3.34": "e3546c794",
    "0.3.33": "78d2f5246",
}

# ggml_backend_dev_type (ggml-backend.h)
_DEV_CPU, _DEV_GPU, _DEV_IGPU, _DEV_ACCEL = 0, 1, 2, 3


@dataclass(frozen=True)
class BuildInfo:
    commit: str
    number: int
    source: str  # where commit and number were read, for the report and the docs


def _lib_dir() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).resolve().parent / "lib"


@functools.lru_cache(maxsize=None)
def _ggml_lib(stem: str):
    """libggml-base / libggml from the package's lib folder, or None when absent."""
    for suffix in (".so", ".dylib", ".dll"):
        path = _lib_dir() / f"lib{stem}{suffix}"
        if path.exists():
            try:
                return ctypes.CDLL(str(path))
            except OSError:
                return None
    return None


def _compiled_commit() -> str:
    lib = _ggml_lib("ggml-base")
    func = getattr(lib, "ggml_commit", None) if lib is not None else None
    if func is None:
        return "unknown"
    func.restype = ctypes.c_char_p
    func.argtypes = []
    value = func()
    return value.decode("utf-8", "replace") if value else "unknown"


@functools.lru_cache(maxsize=None)
def build_info() -> BuildInfo:
    """The llama.cpp inside llama-cpp-python: commit and build number, with their source."""
    commit = _compiled_commit().removesuffix("-dirty")
    if commit and commit != "unknown":
        return BuildInfo(commit, 0, "ggml_commit() compiled into libggml-base; build number not compiled in")
    try:
        version = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        version = ""
    if version in VENDORED_COMMITS:
        return BuildInfo(VENDORED_COMMITS[version], 0,
                         f"llama-cpp-python {version} CHANGELOG (the library was built without git: "
                         f"ggml_commit() says unknown, build number 0)")
    return BuildInfo("unknown", 0, f"llama-cpp-python {version or '(not installed)'}: commit not recorded")


def _registry():
    """(devices as (type, description), backend names as (name, device count)) from libggml."""
    from shardscope.engine.stream.llama_session import ensure_backend  # registers the backends once

    ensure_backend()
    lib = _ggml_lib("ggml")
    if lib is None:
        return [], []
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for name, res, args in (("ggml_backend_dev_count", sz, []), ("ggml_backend_dev_get", vp, [sz]),
                            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
                            ("ggml_backend_dev_description", cp, [vp]), ("ggml_backend_reg_count", sz, []),
                            ("ggml_backend_reg_get", vp, [sz]), ("ggml_backend_reg_name", cp, [vp]),
                            ("ggml_backend_reg_dev_count", sz, [vp])):
        func = getattr(lib, name)
        func.restype, func.argtypes = res, args
    devices = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        devices.append((lib.ggml_backend_dev_type(dev), (lib.ggml_backend_dev_description(dev) or b"").decode()))
    regs = []
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        regs.append(((lib.ggml_backend_reg_name(reg) or b"").decode(), lib.ggml_backend_reg_dev_count(reg)))
    return devices, regs


@functools.lru_cache(maxsize=None)
def machine_info() -> dict:
    """cpu_info, gpu_info, backends, as llama-bench's get_cpu_info/get_gpu_info/get_backend say them."""
    devices, regs = _registry()
    cpu = [d for t, d in devices if t in (_DEV_CPU, _DEV_ACCEL)]
    gpu = [d for t, d in devices if t in (_DEV_GPU, _DEV_IGPU)]
    backends = [n for n, _ in regs if not n.startswith("RPC") and n != "CPU"]
    if any(n.startswith("RPC") and count > 0 for n, count in regs):
        backends.append("RPC")
    return {"cpu_info": ", ".join(cpu), "gpu_info": ", ".join(gpu),
            "backends": ",".join(backends) if backends else "CPU"}


@functools.lru_cache(maxsize=32)
def _model_facts(path: str, size: int, mtime_ns: int) -> tuple[str, int, int]:
    import llama_cpp

    from shardscope.engine.stream.llama_session import ensure_backend

    ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.no_alloc = True  # hyperparameters and tensor shapes only: no weight is read
    params.load_mode = 0  # LLAMA_LOAD_MODE_NONE: no mapping either
    params.use_extra_bufts = False
    model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise ShardscopeError(f"{path}: llama.cpp could not read the model's header")
    try:
        buf = ctypes.create_string_buffer(128)
        llama_cpp.llama_model_desc(model, buf, len(buf))
        return (buf.value.decode("utf-8", "replace"), int(llama_cpp.llama_model_size(model)),
                int(llama_cpp.llama_model_n_params(model)))
    finally:
        llama_cpp.llama_model_free(model)


def model_info(model_path: str) -> dict:
    """model_type, model_size (bytes of tensors), model_n_params, as llama.cpp reports them."""
    stat = Path(model_path).stat()
    desc, size, n_params = _model_facts(str(model_path), stat.st_size, stat.st_mtime_ns)
    return {"model_type": desc, "model_size": size, "model_n_params": n_params}


def _ggml_type_name(type_id: int) -> str:
    lib = _ggml_lib("ggml-base")
    func = getattr(lib, "ggml_type_name", None) if lib is not None else None
    if func is None:
        return str(type_id)
    func.restype, func.argtypes = ctypes.c_char_p, [ctypes.c_int]
    return (func(type_id) or b"").decode() or str(type_id)


def context_info(n_ctx: int) -> dict:
    """The llama.cpp settings a shardscope run uses, in llama-bench's words.

    n_batch/n_ubatch follow engine.stream.llama_session (n_ctx, min(n_ctx, 512)); the rest are
    llama.cpp's defaults, which shardscope does not change, read from the library, and
    the two model settings streaming needs (mmap loading, no repacked weights).
    """
    import llama_cpp

    cparams = llama_cpp.llama_context_default_params()
    mparams = llama_cpp.llama_model_default_params()
    lazy = {0: "off", 1: "auto", 2: "on"}
    split = {0: "none", 1: "layer", 2: "row", 3: "tensor"}
    return {
        "n_batch": int(n_ctx), "n_ubatch": int(min(n_ctx, 512)),
        "cpu_mask": "0x0", "cpu_strict": False, "poll": 50,  # no threadpool given: ggml's defaults
        "type_k": _ggml_type_name(int(cparams.type_k)),
        "type_v": _ggml_type_name(int(cparams.type_v)),
        "n_cpu_moe": 0,
        "split_mode": split.get(int(mparams.split_mode), str(int(mparams.split_mode))),
        "main_gpu": int(mparams.main_gpu),
        "no_kv_offload": not bool(cparams.offload_kqv),
        "flash_attn": int(cparams.flash_attn_type),
        "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
        "load_mode": "mmap",
        "lazy_mode": lazy.get(int(mparams.lazy_mode), str(int(mparams.lazy_mode))),
        "embeddings": bool(cparams.embeddings),
        "no_op_offload": int(not bool(cparams.op_offload)),
        "no_host": bool(mparams.no_host),
        "repack": False,  # use_extra_bufts off: repacked weights could not be evicted
        "fit_target": 0, "fit_min_ctx": 0,
    }


def llama_facts(model_path: str, n_ctx: int) -> dict:
    """Every descriptive llama-bench field for runs of this model with this n_ctx."""
    build = build_info()
    return {"build_commit": build.commit, "build_number": build.number, **machine_info(),
            **model_info(model_path), **context_info(n_ctx)}
