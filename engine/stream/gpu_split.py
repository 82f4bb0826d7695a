"""Dense layers on the GPU while the routed experts stream in host memory (issue #35).

The setup llama.cpp's own users run big MoE models with on a desktop (``-ngl 99 -ot exps=CPU``,
``--n-cpu-moe``): every layer's attention, norms, router and shared experts go to the GPU with
``n_gpu_layers``; the routed-expert tensors stay in a CPU buffer, so they remain a view of the
file mapping, which is what the expert streamer loads into and evicts from. Three pieces of
llama.cpp's C API do it, and llama-cpp-python 0.3.36 wraps only the first two:

* ``llama_model_params.tensor_buft_overrides``: a NULL-terminated array of
  ``{const char *pattern; ggml_backend_buffer_type_t buft}``; a tensor whose name the regex
  matches is put in that buffer type. The binding declares the field a plain ``void *``
  ("unused"), so the array is built here with ctypes, and it must outlive the model
  (llama.cpp reads the patterns while loading; :class:`ExpertsOnCpu` holds it).
* ``llama_context_params.op_offload = False``: with it on, llama.cpp copies host weights to the
  GPU for an op with a large batch (a prompt): a whole layer's expert bank would be read off
  the disk and across the bus, past the budget, for one prompt.
* ``ggml_backend_cpu_buffer_type()`` (libggml-cpu) for the override. What the GPU then holds
  is the figure ``gpu_mb`` (engine/measure/gpu_memory.py).

On a build without GPU offload none of this applies: the run computes on the CPU (the
CLI's note line says so, engine/cli/cli.py), and ``gpu_mb`` is 0.
"""

from __future__ import annotations

import ctypes
import re
import time

from shardscope.engine.measure.gpu_memory import llama_lib

# llama.cpp's own pattern for "routed experts on the CPU" (common/common.h LLM_FFN_EXPS_REGEX,
# used by -ot exps=CPU and --n-cpu-moe). It also covers gpt-oss's expert biases
# ("blk.N.ffn_gate_exps.bias": the regex is searched, not matched whole) and the "chexps" variant.
EXPERT_TENSOR_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
_EXPERT_TENSOR = re.compile(EXPERT_TENSOR_PATTERN)


def is_expert_tensor(name: str) -> bool:
    """True for a tensor the override keeps in host memory (what the engine streams)."""
    return _EXPERT_TENSOR.search(name) is not None


class _BuftOverride(ctypes.Structure):
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


class ExpertsOnCpu:
    """The override array "routed experts → CPU buffer type", kept alive with the model."""

    def __init__(self) -> None:
        cpu = llama_lib("ggml-cpu")
        if cpu is None:
            raise OSError("libggml-cpu not found beside libllama")
        cpu.ggml_backend_cpu_buffer_type.restype = ctypes.c_void_p
        cpu.ggml_backend_cpu_buffer_type.argtypes = []
        self._pattern = EXPERT_TENSOR_PATTERN.encode()
        self._array = (_BuftOverride * 2)(_BuftOverride(self._pattern, cpu.ggml_backend_cpu_buffer_type()),
                                          _BuftOverride(None, None))  # NULL pattern ends the list

    @property
    def pointer(self) -> int:
        return ctypes.addressof(self._array)


def layers_on_gpu(n_gpu_layers: int, n_layer: int) -> tuple[range, bool]:
    """(repeating layers on the GPU, output head on the GPU) for a request, as llama.cpp places
    them (src/llama-model.cpp: i_gpu_start = max(n_layer + 1 − n_gpu_layers, 0): the last
    layers go first, and the output head counts as one more layer). Negative: all of them."""
    if n_gpu_layers < 0:
        n_gpu_layers = n_layer + 1
    start = max(n_layer + 1 - n_gpu_layers, 0)
    return range(min(start, n_layer), n_layer), n_gpu_layers > 0 and start <= n_layer


class ComputeClock:
    """Seconds of a graph's compute on the GPU and on the CPU, from the eval callback's stops.

    The session stops at each MoE layer's ``ffn_moe_topk`` (router done) and ``ffn_moe_out``
    (experts done); ggml synchronises the backend before each stop, so the stretches are compute:
    from the last stop to a router, the layer's attention and router ran on the layer's device
    (the GPU for an offloaded layer); from the router to ``ffn_moe_out`` the experts ran on the CPU;
    after the last stop, the output head on its device. The topk hook's wait for experts is
    left out (``restart`` after it): that is the streamer's wait, counted apart.
    """

    def __init__(self, n_gpu_layers: int, n_layer: int):
        layers, self.output_on_gpu = layers_on_gpu(n_gpu_layers, n_layer)
        self.gpu_layers = frozenset(layers)
        self.seconds = {"gpu": 0.0, "cpu": 0.0}
        self._mark = time.perf_counter()

    def restart(self) -> None:
        self._mark = time.perf_counter()

    def router_done(self, layer: int) -> None:
        self._add("gpu" if layer in self.gpu_layers else "cpu")

    def experts_done(self) -> None:
        self._add("cpu")

    def graph_done(self) -> None:
        self._add("gpu" if self.output_on_gpu else "cpu")

    def _add(self, where: str) -> None:
        now = time.perf_counter()
        self.seconds[where] += now - self._mark
        self._mark = now


__all__ = ["EXPERT_TENSOR_PATTERN", "ExpertsOnCpu", "ComputeClock", "is_expert_tensor",
           "layers_on_gpu"]
