"""The three weights that decide routing, as every synthetic MoE writer obtains them.

Which experts a token picks depends on a layer's router, its router bias (where the arch has one)
and, through the hidden state, on the attention output projection. Every arch writer (synth_moe,
synth_deepseek2, synth_gqa_moe) asks these three functions for those tensors and nothing else, so
a different router (issue #26's engine/synth/synth_router.py) is wired in here, in one place,
for every arch at once.

Today: random F32 router rows (optionally skewed per ``MoeSpec.routing_skew``), a small random
bias, and a random projection scaled down so depth cannot blow up the residual stream.
"""

from __future__ import annotations

from shardscope.engine.synth.synth_shapes import _Tensor

BIAS_SIGMA = 0.02  # a router bias: small next to the unit-scale logits, as a trained one is


def router_scale(spec, layer: int) -> tuple[float, ...]:
    """Per-expert router row scales: the first max(2, n/8) experts (rotated per layer) win more
    often by up to 1 + routing_skew; () leaves the router uniform."""
    if spec.routing_skew <= 0:
        return ()
    n_hot = max(2, spec.experts // 8)
    scale = [1.0] * spec.experts
    for rank in range(n_hot):
        scale[(layer * n_hot + rank) % spec.experts] = 1.0 + spec.routing_skew * (n_hot - rank) / n_hot
    return tuple(scale)


def router_weight(name: str, spec, layer: int, n_embd: int) -> _Tensor:
    """The router ``ffn_gate_inp.weight`` (F32, ne [n_embd, n_expert]): logits of unit scale, so
    picks depend on the token, not on noise."""
    return _Tensor(name, spec.experts, n_embd, False, n_embd ** -0.5, random_f32=True,
                   row_scale=router_scale(spec, layer))


def router_bias(name: str, spec, layer: int) -> _Tensor:
    """A per-expert F32 bias (``exp_probs_b.bias`` or ``ffn_gate_inp.bias``)."""
    return _Tensor(name, 1, spec.experts, False, BIAS_SIGMA, random_f32=True)


def attention_output(name: str, n_embd: int, n_in: int, sigma: float) -> _Tensor:
    """``attn_output.weight`` (Q8_0, ne [n_in, n_embd]) of standard deviation ``sigma``."""
    return _Tensor(name, n_embd, n_in, True, sigma)


__all__ = ["router_weight", "router_bias", "attention_output", "router_scale"]
