"""Which bytes of a mixture-of-experts GGUF belong to which (layer, expert).

A MoE layer stores each routed-expert matrix as one 3-D tensor (``ffn_gate_exps``,
``ffn_up_exps``, ``ffn_down_exps``; ne = [.., .., n_expert]), expert-major: expert e is
the contiguous slice [offset + e·nbytes/n_expert, offset + (e+1)·nbytes/n_expert). An
expert of a layer is the unit expert streaming loads and evicts: its three slices.
Everything else is dense and stays resident: attention, norms, router ``ffn_gate_inp`` (and its
bias), ``exp_probs_b``, shared experts ``*_shexp``, per-expert biases ``ffn_*_exps.bias`` (gpt-oss:
small, and read for every picked expert anyway), whole dense FFN layers between MoE layers
(glm4moe / deepseek2 leading ones, llama4 every other layer), embeddings. In files with 32-byte
alignment an expert's slice shares its first and last page with a neighbour (another expert or a
dense tensor); engine/experts/expert_io.py keeps such a page while anything resident covers it.

Some defects make llama.cpp *abort the process* (GGML_ASSERT, no error return) instead
of failing the load, e.g. a missing ``<arch>.expert_used_count``: they are refused
here first, with one line naming the file and the key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.layout.gguf_layout import ModelLayout, TensorInfo

MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS (1024 in this llama.cpp, for Kimi K3): more aborts llama.cpp
# The graph node whose data holds a layer's picked expert ids, per arch, as "<name>-<layer>".
# Read in llama-cpp-python 0.3.36's src/models/<arch>.cpp: every MoE arch there routes through
# llm_graph_context::build_moe_ffn, which names the ids ffn_moe_topk (after the optional expert
# group mask of deepseek2 / DeepSeek-V3, so the ids are the final picks); files of each arch
# below streamed with identical tokens in tests/test_arch_matrix.py.
TOPK_NODE = "ffn_moe_topk"
TOPK_NODES = {arch: TOPK_NODE for arch in (
    "llama", "qwen2moe", "qwen3moe", "gpt-oss", "glm4moe", "llama4", "deepseek2")}
# The gating each arch's graph applies when the file has no expert_gating_func key (glm4moe and
# deepseek2 read the key with that default; llama4 and gpt-oss fix it in the graph).
_DEFAULT_GATING = {"deepseek2": "sigmoid", "glm4moe": "sigmoid", "llama4": "sigmoid"}
# Recognition is by tensor name, so llama (Mixtral), qwen2moe, qwen3moe, olmoe, granitemoe,
# deepseek2 and the like all qualify; the counts are read under the file's own architecture.
EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps")
_EXPERT_RE = re.compile(r"^blk\.(\d+)\.(" + "|".join(EXPERT_TENSORS) + r")\.weight$")


@dataclass(frozen=True)
class MoeLayout:
    """Expert units and dense ranges of one MoE file (absolute file offsets, exact)."""

    path: str
    architecture: str
    n_expert: int
    n_expert_used: int
    layers: tuple[int, ...]  # layers with routed experts, numeric order
    # per layer: its expert tensors as (offset, bytes per expert)
    expert_tensors: dict[int, tuple[tuple[int, int], ...]]
    dense_ranges: tuple[tuple[int, int], ...]
    total_bytes: int
    # per layer: the router ffn_gate_inp as (offset, ggml type, n_embd), for guessing picks
    routers: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    # how llama.cpp turns router logits into picks: "softmax" (top-k of the logits) or
    # "sigmoid" (top-k of sigmoid(logits) + the per-expert bias ``exp_probs_b``, deepseek2)
    gating: str = "softmax"
    # per layer: the F32 bias ``exp_probs_b.bias`` added to the scores before top-k, as its offset
    router_biases: dict[int, int] = field(default_factory=dict)
    # the graph node carrying the picks (callback name "<topk_node>-<layer>")
    topk_node: str = TOPK_NODE

    def unit_ranges(self, layer: int, expert: int) -> tuple[tuple[int, int], ...]:
        return tuple((off + expert * per, off + (expert + 1) * per) for off, per in self.expert_tensors[layer])

    def unit_bytes(self, layer: int) -> int:
        return sum(per for _, per in self.expert_tensors[layer])

    @property
    def n_layers(self) -> int:
        """Layers with routed experts: the rows of the expert map (ExpertView)."""
        return len(self.layers)

    @property
    def expert_bytes(self) -> int:
        return sum(self.unit_bytes(layer) * self.n_expert for layer in self.layers)

    @property
    def dense_bytes(self) -> int:
        return sum(end - start for start, end in self.dense_ranges)

    @property
    def max_unit_bytes(self) -> int:
        return max(self.unit_bytes(layer) for layer in self.layers)


def _key(layout: ModelLayout, name: str):
    return layout.metadata.get(f"{layout.architecture}.{name}")


def streams_experts(moe: MoeLayout | None, budget_mb: float) -> bool:
    """An MoE model over its budget streams experts (ExpertRun); anything else streams layers."""
    return moe is not None and moe.total_bytes > budget_mb * MIB


# LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax, 2 sigmoid, 3 softmax of the picked weights only
_GATING = {1: "softmax", 2: "sigmoid", 3: "softmax"}


def _check_deepseek2(layout: ModelLayout) -> None:
    """deepseek2 keys whose absence aborts llama.cpp (measured with 0.3.36: SIGABRT on a
    missing rope.dimension_count); the other missing keys fail the load with an error."""
    rope = _key(layout, "rope.dimension_count")
    if rope is None:
        raise ShardscopeError(f"{layout.path}: deepseek2.rope.dimension_count is missing "
                              f"(llama.cpp would abort loading it)")
    key_length = _key(layout, "attention.key_length_mla")
    if not isinstance(rope, int) or rope <= 0 or rope % 2 or (key_length is not None and rope > key_length):
        raise ShardscopeError(f"{layout.path}: deepseek2.rope.dimension_count is {rope!r}; it must be an even "
                              f"number ≤ attention.key_length_mla ({key_length})")


def read_moe_layout(layout: ModelLayout) -> MoeLayout | None:
    """The expert layout of ``layout``; None for a dense model; ShardscopeError if malformed."""
    path, arch = layout.path, layout.architecture
    experts: dict[int, list[TensorInfo]] = {}
    for tensor in layout.tensors:
        match = _EXPERT_RE.match(tensor.name)
        if match:
            experts.setdefault(int(match.group(1)), []).append(tensor)
    count, used = _key(layout, "expert_count"), _key(layout, "expert_used_count")
    if not experts:
        if count:
            raise ShardscopeError(f"{path}: {arch}.expert_count is {count} but the file has no "
                                  f"ffn_*_exps expert tensors")
        return None
    if arch == "deepseek2":
        _check_deepseek2(layout)
    first = min(experts)
    example = experts[first][0].name
    if count is None:
        raise ShardscopeError(f"{path}: {arch}.expert_count is missing, but {example} holds experts "
                              f"(llama.cpp would abort loading it)")
    if used is None:
        raise ShardscopeError(f"{path}: {arch}.expert_used_count is missing (llama.cpp would abort loading it)")
    if not 0 < count <= MAX_EXPERTS:
        raise ShardscopeError(f"{path}: {arch}.expert_count is {count}; llama.cpp takes 1 to {MAX_EXPERTS}")
    if not 0 < used <= count:
        raise ShardscopeError(f"{path}: {arch}.expert_used_count is {used}, but it must be 1 to "
                              f"{arch}.expert_count ({count})")
    per_layer: dict[int, tuple[tuple[int, int], ...]] = {}
    expert_names = set()
    for layer in sorted(experts):
        entries = []
        for tensor in sorted(experts[layer], key=lambda t: t.offset):
            if len(tensor.shape) != 3 or tensor.shape[2] != count or tensor.n_bytes % count:
                held = tensor.shape[2] if len(tensor.shape) == 3 else 1
                raise ShardscopeError(
                    f"{path}: {tensor.name} ({tensor.n_bytes} bytes, shape {list(tensor.shape)}) does not divide "
                    f"into {arch}.expert_count = {count} experts (it holds {held})")
            entries.append((tensor.offset, tensor.n_bytes // count))
            expert_names.add(tensor.name)
        per_layer[layer] = tuple(entries)
    routers = {t.layer: (t.offset, t.ggml_type, t.shape[0]) for t in layout.tensors
               if t.name.endswith(".ffn_gate_inp.weight") and t.layer is not None and len(t.shape) == 2
               and t.shape[1] == count}
    biases = {t.layer: t.offset for t in layout.tensors
              if t.name.endswith(".exp_probs_b.bias") and t.layer is not None and t.ggml_type == 0
              and t.shape[0] == count}
    # Without the key, this llama.cpp (0.3.36) gates deepseek2 by sigmoid: a file without it
    # generated the same tokens as with gating_func = 2.
    gating = _GATING.get(_key(layout, "expert_gating_func") or 0, _DEFAULT_GATING.get(arch, "softmax"))
    dense = tuple(sorted((t.offset, t.offset + t.n_bytes) for t in layout.tensors if t.name not in expert_names))
    return MoeLayout(path=path, architecture=arch, n_expert=int(count), n_expert_used=int(used),
                     layers=tuple(sorted(per_layer)), expert_tensors=per_layer, dense_ranges=dense,
                     total_bytes=layout.weight_bytes, routers=routers, gating=gating,
                     router_biases=biases, topk_node=TOPK_NODES.get(arch, TOPK_NODE))


__all__ = ["MoeLayout", "read_moe_layout", "streams_experts", "EXPERT_TENSORS", "TOPK_NODE", "TOPK_NODES"]
