"""Synthetic MoE routing like a real router's (engine.synth.synth_router): llama.cpp picks the
experts from the weights alone; the statistics of its picks (engine.experts.trace_stats,
checked by hand-made traces in test_trace_stats.py) land within real routing's range, the
text is deterministic and the same under expert streaming."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.experts.trace_stats import trace_stats
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.synth import synth_router
from shardscope.engine.synth.synth import write_synthetic_model
from shardscope.engine.synth.synth_moe import MoeSpec, validate_spec

N_GEN = 64
PROMPT = "The history of the printing press begins"


def _rope_scores(q: np.ndarray, k: np.ndarray, head_dim: int = 64, base: float = 10000.0) -> np.ndarray:
    """q·k / sqrt(head_dim) of the query at the last position against keys at 0..n-1, NORM RoPE
    (pairs 2i, 2i+1 rotated by position · base^(-2i/head_dim)), as llama.cpp computes it."""
    theta = base ** (-np.arange(0, head_dim, 2) / head_dim)
    n = len(k)
    def rot(x, pos):
        c, s = np.cos(pos * theta), np.sin(pos * theta)
        out = np.empty_like(x)
        out[0::2], out[1::2] = x[0::2] * c - x[1::2] * s, x[0::2] * s + x[1::2] * c
        return out
    qn = rot(q, n - 1)
    return np.array([qn @ rot(k[m], m) for m in range(n)]) / np.sqrt(head_dim)


def test_context_head_attends_to_recent_tokens_whatever_they_are():
    """Layer 0 head 0, from the arrays alone: its attention falls with distance for any tokens."""
    rng = np.random.default_rng(1)
    n_embd, n_vocab = 512, 300
    emb = synth_router.token_embedding(n_vocab, n_embd, rng)
    w = synth_router.context_attention(n_embd, 8, 2, 64, 8, rng)
    for tokens in (rng.integers(0, n_vocab, 40), np.full(40, 7)):
        x = emb[tokens]
        x = x / np.sqrt((x ** 2).mean(axis=1, keepdims=True) + 1e-5)  # attn_norm (RMS, weights 1)
        q, k = x[-1] @ w["q"][:64].T, x @ w["k"][:64].T
        sc = _rope_scores(q, k)
        a = np.exp(sc - sc.max())
        a /= a.sum()
        recent = a[::-1]  # distance 0, 1, 2, ...
        assert recent[0] > recent[1] > recent[3] > recent[10]
        assert 0.15 < recent[0] < 0.5 and recent[:8].sum() > 0.5  # mostly the last few tokens, a long tail


def test_mla_context_head_attends_to_recent_tokens():
    """deepseek2's head 0 (q_a → q_a_norm → q_b rope part against the shared rope key), arrays alone."""
    rng = np.random.default_rng(2)
    n_embd, n_head, q_lora, kv_lora = 512, 4, 96, 64
    emb = synth_router.token_embedding(300, n_embd, rng)
    w = synth_router.context_mla(n_embd, n_head, q_lora, kv_lora, 64, 64, 64, 10, rng)
    x = emb[rng.integers(0, 300, 40)]
    x = x / np.sqrt((x ** 2).mean(axis=1, keepdims=True))
    qa = x[-1] @ w["q_a"].T
    q = (qa / np.sqrt((qa ** 2).mean())) @ w["q_b"].T
    assert not q[:64].any()  # head 0 scores by its rope part only
    k_pe = x @ w["kv_a"][kv_lora:].T
    sc = _rope_scores(q[64:128], k_pe, head_dim=64) * np.sqrt(64 / 128)  # deepseek2 divides by sqrt(nope + rope)
    a = np.exp(sc - sc.max())
    recent = (a / a.sum())[::-1]
    assert recent[0] > recent[1] > recent[3] > recent[10] and 0.15 < recent[0] < 0.5 and recent[:8].sum() > 0.5


def test_router_arrays_are_deterministic_and_popularity_grows_with_depth():
    a = synth_router.router_weights(3, 8, 128, 512, np.random.default_rng(5))
    b = synth_router.router_weights(3, 8, 128, 512, np.random.default_rng(5))
    assert a.shape == (128, 512) and a.dtype == np.float32 and np.array_equal(a, b)
    spread = [np.std(synth_router.router_weights(i, 8, 128, 512, np.random.default_rng(i))[:, 0]) for i in (0, 7)]
    assert spread[1] > 2 * spread[0]
    assert synth_router.router_bias(0, 8, 128, np.random.default_rng(0)).shape == (128,)


def test_unknown_routing_is_refused():
    with pytest.raises(ShardscopeError, match="routing must be one of real, uniform"):
        validate_spec(MoeSpec(16, 2, routing="zipf"), "m.gguf")


@pytest.fixture(scope="module")
def real_moe(tmp_path_factory):
    path = tmp_path_factory.mktemp("synth-routing") / "moe-real.gguf"
    info = write_synthetic_model(path, 200, n_layers=6, moe=MoeSpec(128, 8), seed=2)
    return str(path), info


def _run(path: str, budget_mb: int):
    settings = RunSettings(model_path=path, budget_mb=budget_mb, n_gen=N_GEN, n_ctx=192, prompt=PROMPT)
    with open_run(settings) as run:
        summary = run.run()
        records = run.routing_records() if hasattr(run, "routing_records") else None
    return summary.text, records


def test_real_routing_statistics_within_real_ranges_and_text_identical(real_moe):
    path, info = real_moe
    text, trace = _run(path, 110)  # experts stream: the router's own picks decide what loads
    assert trace is not None and trace.n_decoded >= N_GEN - 1
    s = trace_stats(trace)
    # Real routers (BigMoeOnEdge traces: Qwen3-30B-A3B, Gemma-4-26B) against uniform routing's 6.25 %.
    assert s.lag1 >= 0.28 and s.lag8 >= 0.18 and s.lag1 - s.lag8 >= 0.04, s
    assert s.static_topk >= 0.28, s
    assert 0.25 * info.n_expert <= s.distinct_mean <= 0.70 * info.n_expert, s
    assert s.hottest8_last_third - s.hottest8_first_third >= 0.05, s
    whole, _ = _run(path, 4096)  # everything resident: llama.cpp alone
    assert text == whole and len(text) > 0


def test_same_seed_same_bytes(tmp_path):
    a = write_synthetic_model(tmp_path / "a.gguf", 24, n_layers=2, moe=MoeSpec(16, 2), seed=9)
    b = write_synthetic_model(tmp_path / "b.gguf", 24, n_layers=2, moe=MoeSpec(16, 2), seed=9)
    digest = [hashlib.sha256(open(x.path, "rb").read()).hexdigest() for x in (a, b)]
    assert digest[0] == digest[1]


def test_successors_are_one_cycle_through_the_ordinary_tokens():
    nxt = synth_router.successors(807)
    assert (nxt[:3] == -1).all()  # unk, bos, eos: on no cycle, nobody's successor
    seen, token = [], 3
    for _ in range(804):
        seen.append(token)
        token = int(nxt[token])
    assert token == 3 and sorted(seen) == list(range(3, 807))


def test_output_head_pulls_to_the_successor_and_holds_recent_tokens_back():
    """From the arrays alone: with a residual holding the current token's embedding, the head's
    top logit is the token's successor by about SUCCESSOR; a token held in the context block at
    weight w loses about RECENT x w."""
    n_vocab, n_embd, rng = 807, 512, np.random.default_rng(3)
    emb = synth_router.token_embedding(n_vocab, n_embd, rng)
    plain = synth_router.output_head(n_vocab, n_embd, 0.0, rng)  # the structured terms alone
    nxt = synth_router.successors(n_vocab)
    ctx = synth_router.context_dims(n_embd, 64)
    code = synth_router.code_dims(n_embd, 64)
    rms0 = np.sqrt((emb ** 2).mean())  # what the head's scale assumes the residual's RMS is
    for cur in (5, 100, 806):
        h = emb[cur].copy()
        rms = np.sqrt((h ** 2).mean())
        logits = plain @ (h / rms)
        assert int(np.argmax(logits)) == nxt[cur]
        norm2 = (emb[cur, code] ** 2).sum() / (code.stop - code.start)  # this code's length² per dim, ~1
        assert logits[nxt[cur]] == pytest.approx(synth_router.SUCCESSOR * norm2 * rms0 / rms, rel=0.1)
        # the context head wrote token 42's code at weight 0.3 (its value is the code, its output
        # CONTEXT_GAIN / 0.45 per dim): token 42's logit falls by about RECENT x 0.3
        held = h.copy()
        held[ctx] = 0.3 * emb[42, code][: ctx.stop - ctx.start] * synth_router.CONTEXT_GAIN / 0.45
        rms = np.sqrt((held ** 2).mean())
        drop = (plain @ (held / rms) - plain @ (h / rms))[42]
        norm2 = (emb[42, code] ** 2).sum() / (code.stop - code.start)
        assert -drop == pytest.approx(0.3 * synth_router.RECENT * norm2 * rms0 / rms, rel=0.1)


def test_greedy_text_does_not_fall_into_a_short_loop(tmp_path):
    """A default-shaped 128x8 synth whose random head looped (120 MB, seed 2: '…i�les|i�les|…'
    and lag-8 reuse above lag-1) now writes 64 tokens with no loop of period 1 to 8 at the end."""
    from shardscope.engine.stream.llama_session import LlamaSession

    info = write_synthetic_model(tmp_path / "m.gguf", 120, n_layers=8, moe=MoeSpec(128, 8), seed=2)
    with LlamaSession(info.path, n_threads=2, n_ctx=160) as session:
        tokens = list(session.generate(PROMPT, 64).tokens)
    tail = tokens[-24:]
    for period in range(1, 9):
        assert tail[period:] != tail[:-period], f"the text loops with period {period}: {tail}"


def test_a_model_too_narrow_for_a_token_part_still_writes_and_loads(tmp_path):
    """n_embd 64 holds the constant block and a 48-dim context block only (found by
    bench/sweeps/synth_fuzz.py: the router divided by the empty token part's width and synth crashed)."""
    from shardscope.engine.stream.llama_session import LlamaSession

    w = synth_router.router_weights(0, 4, 256, 64, np.random.default_rng(0))
    assert np.isfinite(w).all() and not w[:, 64:].any()
    info = write_synthetic_model(tmp_path / "narrow.gguf", 24, moe=MoeSpec(256, 8, 1, arch="llama4"))
    assert info.n_embd == 64
    with LlamaSession(info.path, n_threads=2, n_ctx=64) as session:
        assert len(session.generate(PROMPT, 3).tokens) == 3
