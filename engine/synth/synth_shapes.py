"""Sizes and shapes of synthetic GGUF models: shared by the dense writer (engine.synth) and
the MoE shapes (engine.synth.synth_moe), so neither imports the other's module."""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardscope.engine.base.units import MIB
from shardscope.engine.synth.synth_quant import Q8_0, QuantType
from shardscope.engine.synth.synth_vocab import SynthVocab

ALIGNMENT = 4096
MIN_SIZE_MB = 8.0
MAX_LAYERS = 512  # LLAMA_MAX_LAYERS in llama.cpp
HEAD_DIM = 64
CONTEXT_LENGTH = 2048
RMS_EPS = 1e-5
ROPE_FREQ_BASE = 10000.0
SIZE_TOLERANCE = 0.05  # the planned file is within 5 % of the requested size

Q8_BLOCK = 32  # weights per Q8_0 block
Q8_BYTES = 34  # f16 scale + 32 int8
_GGML_TYPE_F32 = 0
_GGML_TYPE_Q8_0 = 8
FILE_TYPE_MOSTLY_Q8_0 = 7
CHUNK_BYTES = 8 * MIB
# Standard deviation of an integer drawn uniformly from [-127, 127].
_Q_STD = math.sqrt((255**2 - 1) / 12.0)

LAYER_TENSORS = (
    "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
    "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
)


@dataclass(frozen=True)
class SynthInfo:
    path: str
    size_bytes: int
    n_layers: int
    n_embd: int
    n_ff: int
    n_vocab: int
    n_head: int = 0
    n_head_kv: int = 0
    n_expert: int = 0  # 0: a dense model
    n_expert_used: int = 0
    n_shared_experts: int = 0
    architecture: str = "llama"


@dataclass(frozen=True)
class Tensor:
    name: str
    rows: int  # ne1 (output features); 1 for a vector
    cols: int  # ne0 (input features, the quantized dimension)
    quantized: bool
    sigma: float  # standard deviation of the weights (ignored for norms)
    n_expert: int = 1  # ne2: one [rows, cols] matrix per expert, expert-major (MoE)
    # F32 matrix of random weights (a router), row r scaled by row_scale[r] when given;
    # an F32 tensor without it is a norm (all ones).
    random_f32: bool = False
    row_scale: tuple[float, ...] = ()
    qtype: QuantType = Q8_0  # the block format of a quantized tensor
    # Weights with a structure (engine.synth.synth_router): fill(rng) gives the float matrix
    # [n_expert * rows, cols]; written as F32, or as Q8_0 when ``quantized``.
    fill: object = None
    int32: bool = False  # a table of ids (deepseek4's tid2eid): ``fill`` written as I32, not F32

    @property
    def nbytes(self) -> int:
        if self.quantized:
            return self.n_expert * self.rows * self.qtype.row_bytes(self.cols)
        return self.n_expert * self.rows * self.cols * 4

    def numpy_shape(self) -> tuple[int, ...]:
        """The shape GGUFWriter takes (outermost first; quantized rows given in bytes)."""
        last = self.qtype.row_bytes(self.cols) if self.quantized else self.cols
        if self.n_expert > 1:
            return (self.n_expert, self.rows, last)
        return (last,) if self.rows == 1 and not self.quantized else (self.rows, last)


@dataclass(frozen=True)
class Shape:
    n_layers: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int

    @property
    def n_embd_kv(self) -> int:
        return self.n_head_kv * HEAD_DIM


def align_up(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def q8(rows: int, cols: int) -> int:
    return rows * (cols // Q8_BLOCK) * Q8_BYTES


def kv_heads_for(n_head: int) -> int:
    """Grouped-query attention, 4 query heads per KV head where the numbers allow."""
    for kv in range(max(1, n_head // 4), 0, -1):
        if n_head % kv == 0:
            return kv
    return 1


def layer_bytes(n_embd: int, n_ff: int, n_embd_kv: int) -> int:
    return (2 * align_up(4 * n_embd) + 2 * align_up(q8(n_embd, n_embd)) + 2 * align_up(q8(n_embd_kv, n_embd))
            + 2 * align_up(q8(n_ff, n_embd)) + align_up(q8(n_embd, n_ff)))


def global_bytes(n_embd: int, n_vocab: int) -> int:
    return 2 * align_up(q8(n_vocab, n_embd)) + align_up(4 * n_embd)


def header_bytes(n_layers: int, vocab: SynthVocab, tensors_per_layer: int = len(LAYER_TENSORS)) -> int:
    """An upper estimate of header + metadata + tensor infos, padded (exact enough)."""
    tokens = sum(8 + len(t.encode("utf-8")) for t in vocab.tokens)
    kv = 4096 + tokens + 8 * vocab.n_vocab
    infos = (n_layers * tensors_per_layer + 3) * (8 + 40 + 4 + 24 + 4 + 8)
    return align_up(24 + kv + infos)


def attention_tensors(prefix: str, n_embd: int, n_embd_kv: int, n_layers: int) -> list[Tensor]:
    """A layer's norms and attention, the same in dense and MoE synthetic models.

    Weights of std 1/sqrt(fan_in) keep activations near unit scale; the projection back
    into the residual stream is scaled down by sqrt(2 n_layers) so depth cannot blow it up.
    """
    s_e, s_res = 1.0 / math.sqrt(n_embd), 1.0 / math.sqrt(2.0 * n_layers)
    return [
        Tensor(prefix + "attn_norm.weight", 1, n_embd, False, 0.0),
        Tensor(prefix + "attn_q.weight", n_embd, n_embd, True, s_e),
        Tensor(prefix + "attn_k.weight", n_embd_kv, n_embd, True, s_e),
        Tensor(prefix + "attn_v.weight", n_embd_kv, n_embd, True, s_e),
        Tensor(prefix + "attn_output.weight", n_embd, n_embd, True, s_e * s_res),
        Tensor(prefix + "ffn_norm.weight", 1, n_embd, False, 0.0),
    ]


def edge_tensors(n_vocab: int, n_embd: int) -> tuple[list[Tensor], list[Tensor]]:
    """The globals before the first layer and after the last one."""
    s_e = 1.0 / math.sqrt(n_embd)
    return ([Tensor("token_embd.weight", n_vocab, n_embd, True, 1.0)],
            [Tensor("output_norm.weight", 1, n_embd, False, 0.0),
             Tensor("output.weight", n_vocab, n_embd, True, 2.0 * s_e)])
