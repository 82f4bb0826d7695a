"""The ggml block formats synthetic weights are written in, and random blocks of a chosen scale.

Users' files hold experts as Q8_0, Q4_K / Q6_K (a Q4_K_M file: gate and up Q4_K, down Q6_K)
or MXFP4 (gpt-oss). Their blocks are not a multiple of 4 KiB per expert, so the I/O path meets
slices that share pages with their neighbours; synthetic files must hold the same formats for
the streaming engine to meet them. Block sizes are ggml's (``gguf.constants.GGML_QUANT_SIZES``;
tests compare the two).

The quants are random bytes; only the per-block scales are set, finite and fixed, so that the
dequantized weights have mean ≈ 0 and the requested standard deviation (tests dequantize with
the gguf package, which this module does not use, and check it):

- Q8_0  (32 weights, 34 B): f16 d, 32 int8 in [-127, 127]                 → d · q
- Q4_K (256 weights, 144 B): f16 d, f16 dmin, 12 B of 6-bit scales/mins, 128 B of nibbles
                                                                           → d·sc·q − dmin·m
  all sc = m = 32 (the 12 scale bytes 160×8, 0×4) and dmin = 7.5 d centre q ∈ [0, 15].
- Q6_K (256 weights, 210 B): 128 B low nibbles, 64 B high bits, 16 int8 scales, f16 d
                                                                           → d·sc·(q − 32)
- MXFP4 (32 weights, 17 B): an E8M0 exponent byte, 16 B of 4-bit E2M1 codes
                                                                           → 2^(e−128) · kvalue
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class QuantType:
    name: str
    ggml_type: int  # GGMLQuantizationType value
    block: int  # weights per block
    bytes: int  # bytes per block

    def row_bytes(self, cols: int) -> int:
        return cols // self.block * self.bytes


Q8_0 = QuantType("Q8_0", 8, 32, 34)
Q4_K = QuantType("Q4_K", 12, 256, 144)
Q6_K = QuantType("Q6_K", 14, 256, 210)
MXFP4 = QuantType("MXFP4", 39, 32, 17)
TYPES = {t.name: t for t in (Q8_0, Q4_K, Q6_K, MXFP4)}

# --quant → (gate/up experts, down experts); the dense matrices stay Q8_0 in every scheme.
SCHEMES = {"q8_0": (Q8_0, Q8_0), "q4_k_m": (Q4_K, Q6_K), "mxfp4": (MXFP4, MXFP4)}
# file_type (LLAMA_FTYPE) a file of the scheme declares: MOSTLY_Q8_0, MOSTLY_Q4_K_M, MOSTLY_MXFP4_MOE
FILE_TYPES = {"q8_0": 7, "q4_k_m": 15, "mxfp4": 38}

_Q8_STD = math.sqrt((255**2 - 1) / 12.0)  # an integer uniform in [-127, 127]
_NIBBLE_STD = math.sqrt((16**2 - 1) / 12.0)  # uniform in [0, 15]
_Q6_STD = math.sqrt((64**2 - 1) / 12.0)  # uniform in [0, 63]
_Q4K_SCALE = 32
_Q4K_SCALE_BYTES = np.array([160] * 8 + [0] * 4, dtype=np.uint8)  # every 6-bit scale and min = 32
_Q6K_SCALE = 16
_MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)  # kvalues_mxfp4 (×0.5 in ggml)
_MXFP4_STD = math.sqrt(sum(v * v for v in _MXFP4_VALUES) / 16)


def _f16_bytes(value: float) -> np.ndarray:
    return np.frombuffer(np.array([value], dtype="<f2").tobytes(), dtype=np.uint8)


def random_blocks(qtype: QuantType, n_blocks: int, sigma: float, bitgen: np.random.BitGenerator) -> np.ndarray:
    """``n_blocks`` blocks of ``qtype`` (uint8, shape (n_blocks, qtype.bytes)) of weights with
    standard deviation ≈ ``sigma``: random quants, fixed finite scales."""
    n_bytes = n_blocks * qtype.bytes
    raw = bitgen.random_raw(-(-n_bytes // 8)).view(np.uint8)[:n_bytes]
    buf = raw.reshape(n_blocks, qtype.bytes)
    if qtype is Q8_0:
        np.maximum(buf.view(np.int8), -127, out=buf.view(np.int8))
        buf[:, :2] = _f16_bytes(sigma / _Q8_STD)
    elif qtype is Q4_K:
        d = sigma / (_Q4K_SCALE * _NIBBLE_STD)
        buf[:, 0:2] = _f16_bytes(d)
        buf[:, 2:4] = _f16_bytes(7.5 * d)  # dmin · m = the mean of d · sc · q
        buf[:, 4:16] = _Q4K_SCALE_BYTES
    elif qtype is Q6_K:
        buf[:, 192:208] = _Q6K_SCALE
        buf[:, 208:210] = _f16_bytes(sigma / (_Q6K_SCALE * _Q6_STD))
    elif qtype is MXFP4:
        # ggml: value = kvalue · 2^(e − 127) / 2; the nearest power of two to the wanted scale
        buf[:, 0] = min(254, max(1, 128 + round(math.log2(max(sigma, 1e-30) / _MXFP4_STD))))
    else:
        raise ValueError(f"no random blocks for {qtype.name}")
    return buf


__all__ = ["QuantType", "Q8_0", "Q4_K", "Q6_K", "MXFP4", "TYPES", "SCHEMES", "FILE_TYPES", "random_blocks"]
