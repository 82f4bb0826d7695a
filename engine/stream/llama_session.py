"""One llama.cpp model + context, driven through the low-level API.

Why low-level: the high-level ``Llama`` class cannot turn off ``use_extra_bufts``.
That flag must be off twice over — on these CPUs the AMX repack kernels crash the
first decode, and repacked weights are *copies* in anonymous memory that no eviction
of the file mapping could ever release. Loading uses mmap so the weights stay a view
of the file, which is what the residency controller streams.

The eval callback asks llama.cpp to stop at each layer's first node
(``attn_norm-N``); in the ``ask=False`` call that follows — after the previous layer
has finished computing — the layer hook may block until the layer's weights are in.
For MoE expert streaming it stops at ``ffn_moe_topk-N`` instead: the router's picks
are known there, before the layer's expert matmuls run (``topk_hook``); with both hooks (the
trunk streams by layer beside the experts) it stops at both.

GPU layers with streamed experts (``experts_on_cpu``): dense tensors on the GPU, routed
experts in host memory; the session then also stops at ``ffn_moe_out-N`` to time GPU vs
CPU compute (``clock``). engine/stream/gpu_split.py says how and why.

Stopping: the load progress callback (``load_progress``) can cancel a load; the abort
callback ends the prompt pass (one ``llama_decode`` of every prompt token, or of each
micro-batch where expert streaming asks for them, which can read a whole model) at the
next graph node once ``should_stop`` says so. It is installed for the prompt pass only:
it is called after every node (~400 per token), which costs ~6 % of decode speed, and
decoded tokens already stop between tokens and, when streaming, in the layer hook.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import llama_cpp
import numpy as np

from shardscope.engine.base.errors import RunStopped, ShardscopeError
from shardscope.engine.stream import lazy_mapping, llama_memory
from shardscope.engine.stream.ggml_tensors import load_ggml_base, read_last_row_f32, read_topk_ids
from shardscope.engine.stream.gpu_split import ComputeClock, ExpertsOnCpu

LOAD_MODE_MMAP = 1
_LAYER_NODE = re.compile(rb"^attn_norm-(\d+)$")
_TOPK_NODE = re.compile(rb"^ffn_moe_topk-(\d+)$")
_FFN_NORM_NODE = re.compile(rb"^ffn_norm-(\d+)$")
_MOE_OUT_NODE = re.compile(rb"^ffn_moe_out-(\d+)$")
_SKIP = ("skip", -1)  # a graph node the topk hook lets run on without stopping
_backend_lock = threading.Lock()
_backend_ready = False
_log_tail: deque = deque(maxlen=4000)  # a deepseek4 context logs ~1,000 pieces before its buffer lines
_CONTEXT_MARK = "\0shardscope: context\n"


def _since_mark() -> str:
    """What llama.cpp logged since the last context mark (a context's buffer lines)."""
    lines = list(_log_tail)
    start = max((i for i, line in enumerate(lines) if line == _CONTEXT_MARK), default=-1)
    return "".join(lines[start + 1:])


@llama_cpp.llama_log_callback
def _log_to_tail(level, text, user_data):  # keeps llama.cpp quiet; errors quote the tail
    if text:
        _log_tail.append(text.decode("utf-8", "replace"))


def ensure_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_log_set(_log_to_tail, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True


def _last_log_error() -> str:
    """The most telling line llama.cpp logged: its own "error loading model: …" first."""
    lines = [l.strip() for l in "".join(_log_tail).splitlines() if l.strip() and not l.startswith("\0")]
    for marker in ("error loading model:", "error:", "failed"):
        found = [l for l in lines if marker in l.lower()]
        if found:
            line = found[-1]
            return line.split("error loading model:", 1)[-1].strip() if marker == "error loading model:" else line
    return (lines or ["no details from llama.cpp"])[-1]


def gpu_offload_supported() -> bool:
    ensure_backend()
    return bool(llama_cpp.llama_supports_gpu_offload())


@dataclass
class GenerationResult:
    prompt_tokens: int
    tokens: list[int]
    text: str
    ttft_s: float  # prompt evaluation + first sampled token
    token_s: list[float] = field(default_factory=list)  # each later token's decode time
    perf: dict = field(default_factory=dict)  # llama.cpp's own counters, for cross-checks
    stopped: bool = False


class LlamaSession:
    def __init__(self, model_path: str, *, n_threads: int, n_gpu_layers: int = 0, n_ctx: int = 256,
                 layer_hook: Callable[[int], bool] | None = None, hook_from_start: bool = True,
                 topk_hook: Callable[[int, np.ndarray], bool] | None = None,
                 norm_hook: Callable[[int, np.ndarray], None] | None = None, lazy_load: bool = False,
                 load_progress: Callable[[float], bool] | None = None,
                 prompt_batch: Callable[[], int] | None = None,
                 on_prompt_batch: Callable[[int, int], None] | None = None, experts_on_cpu: bool = False):
        ensure_backend()
        # A streamed model is mapped without reading it (lazy_mapping.py says why and how);
        # load_note says why not where that is unavailable. A model that fits loads as before.
        self.lazy_load = False
        self.load_note = ""
        if lazy_load:
            reason = lazy_mapping.load_lazily(model_path)
            self.lazy_load = reason is None
            self.load_note = "" if reason is None else f"the load reads the whole model first ({reason})"
        self.model_path = model_path
        self.n_threads = n_threads
        self.requested_gpu_layers = n_gpu_layers
        self.gpu_offload = bool(llama_cpp.llama_supports_gpu_offload())
        self.n_gpu_layers = n_gpu_layers if self.gpu_offload else 0
        self.gpu_note = "" if self.gpu_offload or n_gpu_layers == 0 else (
            f"this llama.cpp build has no GPU offload: n_gpu_layers {n_gpu_layers} requested, the run "
            "computes on the CPU")
        self.experts_on_cpu = experts_on_cpu and self.n_gpu_layers != 0  # routed experts kept in host memory
        self.n_ctx = n_ctx
        self.layer_hook = layer_hook
        # MoE expert streaming: called with (layer, expert ids per token) as soon as a
        # layer's router has picked, before its expert matmuls run; it may block there.
        self.topk_hook = topk_hook
        # Optional: the last token's router input (``ffn_norm-N``), for guessing the next
        # layer's experts; one more graph split per layer, so only when asked for.
        self.norm_hook = norm_hook
        # Expert streaming: prompt tokens per llama_decode (0: all at once), asked at each prompt,
        # so a batch's picks in a layer fit the expert cache (engine/layout/budget_minimum.py);
        # on_prompt_batch(i, n) is told before batch i (0-based) of n is decoded.
        self.prompt_batch = prompt_batch
        self.on_prompt_batch = on_prompt_batch
        # The eval callback costs ~5-10 % of decode speed (a Python call per graph node),
        # so a model that fits its budget runs without it; a budget cut mid-run turns it
        # on by rebuilding the context between tokens (see request_layer_hook).
        self.hook_active = (layer_hook is not None or topk_hook is not None) and hook_from_start
        self._hook_requested = False
        self._model = None
        self._ctx = None
        self._callback = None
        self._node_cache: dict[int, int] = {}
        self._node_actions: dict[int, tuple[str, int]] = {}  # decode-graph node address → action
        self._graph_tokens = 0  # tokens of the batch being decoded (the graph's shape)
        # Kept referenced for the life of the session: a collected ctypes callback segfaults.
        self._load_progress = load_progress
        self._load_cancelled = False
        self._load_error: BaseException | None = None
        self._progress_callback = llama_cpp.llama_progress_callback(self._on_load_progress)
        self._abort_check: Callable[[], bool] | None = None
        self._abort_callback = llama_cpp.ggml_abort_callback(self._on_abort)
        try:
            self._load_model()
        finally:
            if self.lazy_load:  # only this load: a later one of the same file decides for itself
                lazy_mapping.load_eagerly(model_path)
        self._create_context()

    # ------------------------------------------------------------ lifecycle
    def _load_model(self) -> None:
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = self.n_gpu_layers
        params.load_mode = LOAD_MODE_MMAP
        params.use_extra_bufts = False
        self._overrides = ExpertsOnCpu() if self.experts_on_cpu else None  # must outlive the model: held here
        if self._overrides is not None:
            params.tensor_buft_overrides = self._overrides.pointer
        if self._load_progress is not None:
            params.progress_callback = self._progress_callback
        _log_tail.clear()
        self._model = llama_cpp.llama_model_load_from_file(self.model_path.encode(), params)
        if self._load_error is not None:
            raise self._load_error
        if not self._model:
            if self._load_cancelled:
                raise RunStopped(f"{self.model_path}: load stopped")
            raise ShardscopeError(f"{self.model_path}: llama.cpp could not load the model ({_last_log_error()})")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self.n_layer = llama_cpp.llama_model_n_layer(self._model)
        self.clock = ComputeClock(self.n_gpu_layers, self.n_layer) if self.experts_on_cpu else None  # GPU vs CPU s

    def _create_context(self) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = self.n_ctx
        params.n_ubatch = min(self.n_ctx, 512)
        params.n_threads = self.n_threads
        params.n_threads_batch = self.n_threads
        params.no_perf = False
        if self.experts_on_cpu:  # a prompt must not copy whole expert banks to the GPU (gpu_split.py)
            params.op_offload = False
        if self.hook_active:
            self._ggml = load_ggml_base()
            self._get_name = self._ggml.ggml_get_name
            on_node = self._on_topk_node if self.topk_hook is not None else self._on_node
            self._callback = llama_cpp.ggml_backend_sched_eval_callback(on_node)
            params.cb_eval = self._callback
            params.cb_eval_user_data = None
        _log_tail.append(_CONTEXT_MARK)  # the buffer lines after it are this context's (llama_memory.py)
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        self.memory = llama_memory.from_log(_since_mark())
        if not self._ctx:
            raise ShardscopeError(f"{self.model_path}: llama.cpp could not create a context "
                                  f"(n_ctx {self.n_ctx}: {_last_log_error()})")

    def close(self) -> None:
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> "LlamaSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ callbacks
    def _on_load_progress(self, fraction, user_data) -> bool:
        """False cancels the load; an exception here must not cross into C (it would be lost)."""
        try:
            go_on = bool(self._load_progress(float(fraction)))
        except BaseException as exc:  # noqa: BLE001 - re-raised by _load_model on its own thread
            self._load_error = exc
            go_on = False
        self._load_cancelled = self._load_cancelled or not go_on
        return go_on

    def _on_abort(self, user_data) -> bool:
        check = self._abort_check
        return bool(check is not None and check())

    def _abortable(self, should_stop: Callable[[], bool] | None) -> None:
        """Install (or, with None, remove) the abort callback on the context."""
        self._abort_check = should_stop
        callback = self._abort_callback if should_stop is not None else llama_cpp.ggml_abort_callback()
        llama_cpp.llama_set_abort_callback(self._ctx, callback, None)

    def _on_node(self, tensor, ask, user_data):
        layer = self._node_cache.get(tensor)
        if layer is None:
            match = _LAYER_NODE.match(self._get_name(tensor) or b"")
            layer = int(match.group(1)) if match else -1
            self._node_cache[tensor] = layer
        if ask:
            return layer >= 0
        if layer < 0:
            return True
        return self.layer_hook(layer)

    def _on_topk_node(self, tensor, ask, user_data):
        """Stop at each ``ffn_moe_topk-N``; the ask=False call has the ids, before the experts run.

        llama.cpp asks about every graph node (~30 a layer): what to do with a node is decided
        once per node of the single-token decode graph and looked up by address after that (one
        dict lookup a node, no call into ggml, no regex; issue #24). That graph is rebuilt in the
        same buffer in the same order every token, so an address names the same node; a prompt
        pass's graph differs (its last layer keeps only the output row), so it reads names. A
        stop the lookup asked for is checked against the node's name before acting on it.
        """
        if ask:
            action = self._node_actions.get(tensor) if self._graph_tokens == 1 else None
            if action is None:
                action = self._node_action(tensor)
                if self._graph_tokens == 1:
                    self._node_actions[tensor] = action
            return action is not _SKIP
        action = self._node_action(tensor)  # the stops only (1-2 a layer): the name is read again
        if action is _SKIP:  # the graph changed under the lookup: decide afresh from now on
            self._node_actions.clear()
            return True  # False here would abort the graph
        kind, layer = action
        if kind == "layer":  # the trunk streams too: its layer's shards before the layer computes
            return self.layer_hook(layer)
        if kind == "norm":
            self.norm_hook(layer, read_last_row_f32(self._ggml, tensor))
            return True
        if kind == "out":
            self.clock.experts_done()
            return True
        if self.clock is not None:
            self.clock.router_done(layer)
        go_on = self.topk_hook(layer, read_topk_ids(self._ggml, tensor))
        if self.clock is not None:
            self.clock.restart()  # the hook's wait for experts is no compute
        return go_on

    def _node_action(self, tensor):
        """("topk" | "layer" (a layer hook too: the trunk streams) | "norm" (a norm hook wants it) | "out"
        (GPU layers are timed), layer), else _SKIP."""
        name = self._get_name(tensor) or b""
        match = _TOPK_NODE.match(name)
        if match is not None:
            return "topk", int(match.group(1))
        layer = _LAYER_NODE.match(name) if self.layer_hook is not None else None
        if layer is not None:
            return "layer", int(layer.group(1))
        norm = _FFN_NORM_NODE.match(name) if self.norm_hook is not None else None
        if norm is not None:
            return "norm", int(norm.group(1))
        out = _MOE_OUT_NODE.match(name) if self.experts_on_cpu else None
        return ("out", int(out.group(1))) if out is not None else _SKIP

    def request_layer_hook(self) -> None:
        """Turn the per-layer hook on at the next token boundary (thread-safe flag)."""
        if self.layer_hook is not None and not self.hook_active:
            self._hook_requested = True

    def _install_hook_now(self, history: list[int], should_stop: Callable[[], bool] | None = None) -> None:
        """New context with the eval callback; replay the tokens already in the KV cache."""
        llama_cpp.llama_free(self._ctx)
        self._ctx = None
        self._node_cache.clear()
        self._node_actions.clear()
        self.hook_active = True
        self._hook_requested = False
        self._create_context()
        if history:  # a replay of the prompt pass: as long, and as stoppable
            self._abortable(should_stop)
            try:
                self._decode(history)
            finally:
                self._abortable(None)

    # ------------------------------------------------------------ tokens
    def set_threads(self, n_threads: int) -> None:
        self.n_threads = n_threads
        llama_cpp.llama_set_n_threads(self._ctx, n_threads, n_threads)

    def tokenize(self, text: str) -> list[int]:
        raw = text.encode("utf-8")
        buf = (llama_cpp.llama_token * (len(raw) + 16))()
        n = llama_cpp.llama_tokenize(self._vocab, raw, len(raw), buf, len(buf), True, False)
        if n < 0:
            raise ShardscopeError("prompt could not be tokenized")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[: max(n, 0)]

    def _decode(self, tokens: list[int]) -> None:
        arr = (llama_cpp.llama_token * len(tokens))(*tokens)
        self._graph_tokens = len(tokens)  # the eval callback's node lookup holds for one graph shape
        batch = llama_cpp.llama_batch_get_one(arr, len(tokens))
        timed = self.clock is not None and self.hook_active
        if timed:
            self.clock.restart()
        rc = llama_cpp.llama_decode(self._ctx, batch)
        if timed:
            self.clock.graph_done()
        if rc != 0:
            raise _DecodeFailed(rc)

    def _decode_prompt(self, tokens: list[int]) -> None:
        """The prompt in micro-batches where the run asks for them, else in one llama_decode.

        Each llama_decode continues the sequence where the KV cache left it (positions come from
        the memory), so the batches compute what one pass would; the last batch's last token
        gives the logits the first sampled token is taken from.
        """
        size = self.prompt_batch() if self.prompt_batch is not None else 0
        size = size if 0 < size < len(tokens) else len(tokens)
        batches = [tokens[i:i + size] for i in range(0, len(tokens), size)]
        for i, batch in enumerate(batches):
            if self.on_prompt_batch is not None:
                self.on_prompt_batch(i, len(batches))
            self._decode(batch)

    def _next_token(self, rng: np.random.Generator | None, temperature: float) -> int:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))
        if rng is None or temperature <= 0:
            return int(np.argmax(logits))
        scaled = (logits - logits.max()) / temperature
        probs = np.exp(scaled)
        probs /= probs.sum()
        return int(rng.choice(self.n_vocab, p=probs))

    def generate(self, prompt: str, n_gen: int, *, temperature: float = 0.0, seed: int = 0,
                 on_token: Callable[[int, int, bytes, float], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> GenerationResult:
        """Plain completion; greedy unless ``temperature`` > 0 (then seeded sampling).

        End-of-generation tokens do not stop it: like llama-bench, a run makes exactly
        ``n_gen`` tokens so runs compare.
        """
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self._ctx), True)
        llama_cpp.llama_perf_context_reset(self._ctx)
        prompt_tokens = self.tokenize(prompt)
        if len(prompt_tokens) + n_gen > self.n_ctx:
            raise ShardscopeError(
                f"prompt ({len(prompt_tokens)} tokens) + {n_gen} generated tokens exceed n_ctx {self.n_ctx}")
        rng = np.random.default_rng(seed) if temperature > 0 else None
        out: list[int] = []
        text = bytearray()
        durations: list[float] = []
        stopped = False
        start = time.perf_counter()
        try:
            self._abortable(should_stop)
            try:
                self._decode_prompt(prompt_tokens)
            finally:
                self._abortable(None)
        except _DecodeFailed:
            if should_stop and should_stop():  # Stop pressed while the prompt was computing
                return GenerationResult(prompt_tokens=len(prompt_tokens), tokens=[], text="",
                                        ttft_s=float("nan"), stopped=True)
            raise
        token = self._next_token(rng, temperature)
        ttft = time.perf_counter() - start
        out.append(token)
        text += self.piece(token)
        if on_token:
            on_token(0, token, self.piece(token), ttft)
        while len(out) < n_gen:
            if should_stop and should_stop():
                stopped = True
                break
            t0 = time.perf_counter()
            try:
                if self._hook_requested:
                    self._install_hook_now(prompt_tokens + out[:-1], should_stop)
                    t0 = time.perf_counter()
                self._decode([token])
            except _DecodeFailed:
                if should_stop and should_stop():  # the layer hook aborted the graph for Stop
                    stopped = True
                    break
                raise
            token = self._next_token(rng, temperature)
            dt = time.perf_counter() - t0
            durations.append(dt)
            out.append(token)
            piece = self.piece(token)
            text += piece
            if on_token:
                on_token(len(out) - 1, token, piece, dt)
        perf = llama_cpp.llama_perf_context(self._ctx)
        return GenerationResult(
            prompt_tokens=len(prompt_tokens), tokens=out, text=text.decode("utf-8", "replace"),
            ttft_s=ttft, token_s=durations, stopped=stopped,
            perf={"t_p_eval_ms": perf.t_p_eval_ms, "t_eval_ms": perf.t_eval_ms,
                  "n_p_eval": perf.n_p_eval, "n_eval": perf.n_eval},
        )


class _DecodeFailed(Exception):
    def __init__(self, rc: int):
        super().__init__(f"llama_decode returned {rc}")
        self.rc = rc
