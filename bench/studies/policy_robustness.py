"""Does ``auto`` hold on routers it was not built on? Synthetic routing traces of other shapes.

Generates routing traces with numpy (no model, no llama.cpp): per layer, router logits =
popularity (β · b_x, b ~ N(0,1)) + a context (a recency-weighted mean of random token vectors,
memory m, seen through a per-layer projection, weight c) + the token's own part (weight z),
optionally a popularity that drifts (a random walk of step s per token), the router's order
kept (best first) or shuffled (ids only, no rank). Each shape (layers × experts × top-k) and
each routing mix is replayed at 0.5×, 1×, 1.5×, 2× and 4× one token's picks through lru, lfu,
decay, rank and auto, beside the optimum; printed: auto − the best other, auto − lru, auto −
decay, in points, and the worst of them over all cases.

    .venv/bin/python -m bench.studies.policy_robustness [--quick]

The shapes and mixes are fixed here before looking at any result; none is a public trace's.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from shardscope.engine.experts.replay import replay_one
from shardscope.engine.experts.routing_trace import RoutingTrace, TraceHeader, TraceRecord

SHAPES = [(4, 16, 1), (8, 8, 2), (12, 32, 4), (16, 64, 8), (24, 128, 2), (32, 256, 8), (40, 160, 10), (61, 384, 8)]
MIXES = {  # name: (β popularity, c context, z token, m context memory, drift step, order kept)
    "steady-popular": (1.8, 0.6, 0.6, 0.8, 0.0, True),
    "context-heavy": (0.5, 1.5, 0.6, 0.9, 0.0, True),
    "token-noise": (0.6, 0.6, 1.5, 0.5, 0.0, True),
    "lag-1 bursts": (0.3, 2.0, 0.4, 0.3, 0.0, True),
    "drifting": (1.2, 0.8, 0.6, 0.8, 0.15, True),
    "ids-shuffled": (1.0, 1.2, 0.6, 0.8, 0.05, False),
}
SIZES = (0.5, 1.0, 1.5, 2.0, 4.0)
POLICIES = ("lru", "lfu", "decay", "rank", "auto")


def synthetic_trace(layers: int, n_expert: int, k: int, mix: tuple, tokens: int = 128, prompt: int = 24,
                    seed: int = 0, unit: int = 1 << 20) -> RoutingTrace:
    beta, c, z, memory, drift, ordered = mix
    rng = np.random.default_rng(seed)
    d = 16
    pop = rng.standard_normal((layers, n_expert)) * np.linspace(0.5, 1.0, layers)[:, None] * beta
    proj = rng.standard_normal((layers, n_expert, d)) / np.sqrt(d)
    ctx = np.zeros(d)
    records, union = [], [dict() for _ in range(layers)]
    for t in range(prompt + tokens):
        ctx = memory * ctx + (1 - memory) * rng.standard_normal(d) * 3.0
        if drift:
            pop += drift * rng.standard_normal(pop.shape)
        logits = pop + c * (proj @ ctx) + z * rng.standard_normal((layers, n_expert))
        for layer in range(layers):
            picks = [int(e) for e in np.argsort(-logits[layer])[:k]]
            if not ordered:
                rng.shuffle(picks)
            if t < prompt:
                for e in picks:
                    union[layer][e] = union[layer].get(e, 0) + 1
            else:
                records.append(TraceRecord(t, layer, tuple(picks)))
    head = [TraceRecord(0, layer, tuple(union[layer]), tuple(union[layer].values()), True) for layer in range(layers)]
    header = TraceHeader("synthetic", n_expert, k, {layer: unit for layer in range(layers)})
    return RoutingTrace(header, tuple(head + records))


def main(quick: bool) -> None:
    shapes = SHAPES[:5] if quick else SHAPES
    worst = {"best": (1e9, None), "lru": (1e9, None), "decay": (1e9, None)}
    print(f"{'shape':>12} {'mix':>15} {'x':>4} " + " ".join(f"{p:>6}" for p in POLICIES + ("optimal",)) +
          "  auto-best auto-lru auto-decay")
    for (layers, n_expert, k), (name, mix) in itertools.product(shapes, MIXES.items()):
        trace = synthetic_trace(layers, n_expert, k, mix)
        one = layers * k * (1 << 20)
        for x in SIZES:
            cap = max(int(one * x), k * (1 << 20) * 2)
            if cap >= layers * n_expert * (1 << 20):
                continue
            rates = {p: 100 * replay_one(trace, p, cap).expert_hit_rate for p in POLICIES + ("optimal",)}
            best = max(rates[p] for p in POLICIES if p != "auto")
            d = {"best": rates["auto"] - best, "lru": rates["auto"] - rates["lru"],
                 "decay": rates["auto"] - rates["decay"]}
            case = f"{layers}x{n_expert}x{k} {name} {x}x"
            for key, v in d.items():
                if v < worst[key][0]:
                    worst[key] = (v, case)
            print(f"{layers:>3}x{n_expert:>3}x{k:<2} {name:>15} {x:>4} " +
                  " ".join(f"{rates[p]:6.1f}" for p in POLICIES + ("optimal",)) +
                  f"  {d['best']:+8.1f} {d['lru']:+8.1f} {d['decay']:+9.1f}", flush=True)
    for key, (v, case) in worst.items():
        print(f"worst auto - {key}: {v:+.1f} points ({case})")


if __name__ == "__main__":
    main("--quick" in sys.argv[1:])
