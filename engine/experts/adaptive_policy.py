"""``auto``: follow whichever candidate order would have hit most over the recent routing.

No single eviction order wins on every router: decay beats lru by 3-8 points on the three
public traces, but on another model's trace at one token's picks it loses to lru by more than
4 (issue 34), and on a router whose preferences never drift lfu wins. So the live cache keeps a
shadow directory per candidate (lru, lfu, decay, rank: expert ids and their ticks only, no
data, the same byte capacity), replays every access through each, and scores each by its
decoded hits with a half-life of ``WINDOW_TOKENS`` tokens. The live cache evicts in the order
of the leader; a challenger takes over only when its score passes the leader's by more than
``MARGIN`` of the window's decoded picks (half a point of hit rate), so two orders that hit
alike do not swap back and forth (each swap costs the misses of the units the two keep
differently). A margin relative to the leader's hits was stickier where hit rates are high
(5 % of 66 % is 3.3 points: 1.3 points below lru on a generated 16x64x8 router). Nothing is loaded
or evicted by a switch: the next victims just come from the new order.

It is online (the scores are of past accesses only) and deterministic, so ``replay``, the
cacheability curve, ``plan --trace`` and a live run take the same decisions. Its cost per
access is one shadow access per candidate: O(k) dictionary and heap steps for lru and lfu;
decay and rank also weigh layer heads on a miss (bounded, at worst O(layers)); while the live
cache holds what its leader's directory holds it takes the leader's victims instead of searching
(bench/studies/policy_search.py --cost prints the CPU per token: 7-10x decay's, docs/real-traces.md).

None of the constants were fitted to the public traces: the candidates are the engine's orders
(rank added for what the router's order says, a loser wherever it says nothing), the first
leader is decay (the measured best on real routers before any decoded token is scored), the
window is two decay half-lives and the margin half a point, the scale of the issue's targets
(chosen on generated routers: bench/studies/policy_robustness.py; the variants that lost are listed in
bench/studies/policy_search.py).
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

CANDIDATES = ("decay", "lru", "lfu", "rank")  # the first leads until a decoded pass is scored
WINDOW_TOKENS = 16.0  # the scores' half-life, in decoded tokens
MARGIN = 0.005  # a challenger must hit this share of the window's picks more than the leader to take over
NOISE = 0.0  # ... plus this many standard deviations of its count (1-2 measured worse: slower to leave)


class ShadowDirectories:
    def __init__(self, make_cache: Callable[[str], object], n_layers: int,
                 candidates: Iterable[str] = CANDIDATES, window_tokens: float = WINDOW_TOKENS,
                 margin: float = MARGIN):
        self.caches = {name: make_cache(name) for name in candidates}
        self.names = tuple(self.caches)
        self.keep = 0.5 ** (1.0 / (window_tokens * max(n_layers, 1)))  # per layer access
        self.margin = margin
        self.noise = NOISE
        self.score = dict.fromkeys(self.names, 0.0)
        self.picks = 0.0  # decoded picks in the window, decayed alike
        self.hits = dict.fromkeys(self.names, 0)  # decoded hits over the whole run, per candidate
        self.leader = self.names[0]
        self.got: dict = {}  # candidate → its shadow's Access for the last access (the leader's is mirrored)
        self._pending: tuple | None = None  # the access decided and not yet applied to every shadow
        self.switches = 0

    def access(self, layer: int, experts: list[int], weights: Mapping[int, int] | None) -> str:
        """Replay one access through every shadow; the order to evict by from now on."""
        leader = self.decide(layer, experts, weights)
        self.settle()
        return leader

    def decide(self, layer: int, experts: list[int], weights: Mapping[int, int] | None) -> str:
        """Score one access (``experts`` distinct) and return the order to evict by from now on; the
        shadows take the access itself at ``settle``. A shadow's hits are the picks it holds before
        the access, so scoring needs no search for victims: the live cache decides, and its reads go
        out, before the four shadows' searches run (they were most of auto's cost a layer)."""
        self.settle()
        keep = self.keep
        score = self.score
        if weights is None:  # decoded passes only: a prompt's union hits nothing useful
            for name, cache in self.caches.items():
                resident = cache.resident
                n = sum(1 for e in experts if (layer, e) in resident)
                self.hits[name] += n
                score[name] = score[name] * keep + n
            self.picks = self.picks * keep + len(experts)
            best = max(self.names, key=score.__getitem__)
            lead = score[self.leader]
            if best != self.leader and score[best] > lead + self.margin * self.picks + self.noise * lead ** 0.5:
                self.leader = best
                self.switches += 1
        self._pending = (layer, experts, weights)
        self.got = {}
        return self.leader

    def settle(self, name: str | None = None):
        """Apply the decided access to every shadow, or to ``name``'s alone (then its Access); a
        later ``decide`` settles first, so the shadows see every access in order either way."""
        pending = self._pending
        if pending is None:
            return self.got.get(name) if name else None
        for candidate, cache in self.caches.items():
            if (name is None or candidate == name) and candidate not in self.got:
                self.got[candidate] = cache.access(*pending)
        if len(self.got) == len(self.caches):
            self._pending = None
        return self.got.get(name) if name else None

    def seed(self, resident: Mapping[tuple[int, int], int]) -> None:
        """Start every shadow from the live cache's units (a switch to auto mid-run)."""
        self.settle()
        for cache in self.caches.values():
            cache.seed(resident)

    def set_capacity(self, capacity_bytes: int) -> None:
        self.settle()
        for cache in self.caches.values():
            cache.capacity_bytes = capacity_bytes


__all__ = ["ShadowDirectories", "CANDIDATES", "WINDOW_TOKENS", "MARGIN"]
