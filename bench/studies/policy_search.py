"""Search for an online expert-cache policy on the real route traces (issue #25 item 3).

Loads the three BigMoeOnEdge traces once, replays the same accesses as ``replay`` (prompt
unions fitted to the cache first, decoded tokens counted) through candidate policies in a
small standalone simulator, and prints each one's hit rate and its share of the way from
lru to Belady's optimum (engine/experts/optimal_cache.py) at 1x and 2x one token's picks.

    .venv/bin/python -m bench.studies.policy_search [policy ...]     (TRACES=gptoss,gemma to pick traces)

Findings (docs/decisions.md, "Issue 25: the online policy search"): no candidate reaches half
the gap; one pass of foresight (oracle-next-pass, not online) does on five of six points.

Issue 34 (the engine's ``auto``: shadow directories of lru, lfu, decay and rank, the live cache
evicting in the order of the one with the most decoded hits over a 16-token half-life, a 5 %
margin to switch) — the engine's own replay, not this simulator:

    .venv/bin/python -m bench.studies.policy_search --table [trace.csv ...]   docs/real-traces.md's table
    .venv/bin/python -m bench.studies.policy_search --cost                    auto's CPU per decoded token

Candidates for auto that lost (mean share of the lru→optimum gap over the six points; decay
alone 24.96 %; every variant below starts from decay):
  shadows lru, lfu, decay, the live cache switching its eviction key      24.37 %
  ... the live cache evicting first what the leader's shadow does not hold 23.66 %
  ... window 64 tokens                                                    24.64 %
  ... one leader per group of 4 layers (outcast eviction)                 23.14 %
  ... one leader per layer                                                21.45 %
  ... plus decay at half-lives 4 and 16 (key switching)                   24.96 %
  lru, decay, rank followed by their resident sets (policy_search's rank) 27.63 % (gpt-oss at
      908 MiB 1.0 point below decay: missed "≥ decay − 0.5")
  kept: lru, lfu, decay, rank, key switching, window 16, margin 5 %       28.31 %, every point
      within 0.3 of decay and at or above lru
On generated routers (bench/studies/policy_robustness.py, 4x16x1 to 12x32x4, 6 routing mixes, 1-2x one
token's picks; auto minus the best of lru, decay, lfu): margin 5 % + one standard deviation of
the leader's count, worst -2.6 mean -0.67; + two, worst -6.4 mean -1.40 (slower to leave decay
where lru wins); none, worst -2.9 mean -0.17 (kept: the worst cases are 4-layer top-1 routers,
where 16 tokens hold 64 picks).
"""

from __future__ import annotations

import math
import os
import sys
import time

from shardscope.engine.experts.decaying_frequency import DecayingFrequency
from shardscope.engine.experts.foreign_traces import load_trace
from shardscope.engine.experts.optimal_cache import belady_hits
from shardscope.engine.experts.replay import run_order

# one and two tokens' picks, as tests/test_real_trace_policy.py and the docs replay them
SIZES_MB = {"qwen": (783, 1566), "gemma": (677, 1354), "gptoss": (908, 1816)}
TRACES = {n: f"tests/data/route-traces/{n}.route.csv" for n in ("qwen", "gemma", "gptoss")}


class Sim:
    """Resident units, bytes, and a policy choosing victims; returns decoded hits/misses."""

    def __init__(self, policy, capacity, unit_bytes):
        self.policy, self.capacity, self.unit_bytes = policy, capacity, unit_bytes
        self.resident: dict[int, set[int]] = {l: set() for l in unit_bytes}
        self.used = 0

    def run(self, records):
        hits = misses = 0
        for r in records:
            layer, experts = r.layer, list(dict.fromkeys(r.experts))
            counts = dict(zip(r.experts, r.counts)) if r.prompt else None
            res = self.resident[layer]
            absent = [e for e in experts if e not in res]
            if not r.prompt:
                hits += len(experts) - len(absent)
                misses += len(absent)
            self.policy.touch(layer, experts, counts, r)
            need = len(absent) * self.unit_bytes[layer]
            while self.used + need > self.capacity:
                vl, ve = self.policy.victim(self.resident, layer, set(experts))
                self.resident[vl].discard(ve)
                self.used -= self.unit_bytes[vl]
            for e in absent:
                res.add(e)
                self.used += self.unit_bytes[layer]
        return hits, misses


class Lru:
    def __init__(self, trace, capacity):
        self.last, self.tick = {}, 0

    def touch(self, layer, experts, counts, r):
        # one tick per pick, in router order: ExpertCache's tie rule (the dict order of one access)
        for e in experts:
            self.tick += 1
            self.last[(layer, e)] = self.tick

    def key(self, l, e):
        """Smallest leaves first."""
        return self.last[(l, e)]

    def victim(self, resident, layer, protected):
        return min(((l, e) for l, res in resident.items() for e in res
                    if not (l == layer and e in protected)), key=lambda u: self.key(*u))


class Decay(Lru):
    def __init__(self, trace, capacity, half_life=8.0):
        super().__init__(trace, capacity)
        self.d = DecayingFrequency(sorted(trace.header.unit_bytes), trace.header.n_expert_used, half_life)

    def touch(self, layer, experts, counts, r):
        super().touch(layer, experts, counts, r)
        self.d.picked(layer, experts, counts)

    def key(self, l, e):
        return (-self.d.expected_wait((l, e)), self.last[(l, e)])


class Calibrated(Decay):
    """decay's expected wait, but the chance of a pick at the layer's next pass is read from
    what that layer did so far: per layer, units binned by decay's chance (and whether the
    layer's last pass picked them) and each bin's decayed share of picks at the next pass."""

    BINS = 8

    def __init__(self, trace, capacity, half_life=8.0):
        super().__init__(trace, capacity, half_life)
        self.known = {}
        self.layers = sorted(trace.header.unit_bytes)
        self.table = {l: [[0.5, 1.0] for _ in range(2 * self.BINS)] for l in self.layers}
        self.prev = {l: set() for l in self.layers}
        self.keep = 0.5 ** (1.0 / 32)  # calibration memory: a few dozen passes

    def bin(self, unit, prev):
        c = self.d.chance(unit)
        return min(self.BINS - 1, int(c * self.BINS)) + (self.BINS if unit[1] in prev else 0)

    def touch(self, layer, experts, counts, r):
        if counts is None:
            picked = set(experts)
            prev = self.prev[layer]
            tab = self.table[layer]
            for row in tab:
                row[0] *= self.keep
                row[1] *= self.keep
            for (l, e) in self._units(layer):
                b = self.bin((l, e), prev)
                tab[b][1] += 1.0
                if e in picked:
                    tab[b][0] += 1.0
            self.prev[layer] = picked
        self.known.setdefault(layer, set()).update(experts)
        super().touch(layer, experts, counts, r)

    def _units(self, layer):
        return [(layer, e) for e in self.known.setdefault(layer, set())]

    known: dict = None

    def victim(self, resident, layer, protected):
        best = None
        n = len(self.layers)
        cur = self.d.current
        for l, res in resident.items():
            tab, prev = self.table[l], self.prev[l]
            steps = (self.d.position[l] - cur) % n or n
            for e in res:
                if l == layer and e in protected:
                    continue
                row = tab[self.bin((l, e), prev)]
                p = max(row[0] / row[1], 1e-6)
                key = (-(steps + n * (1 / p - 1)), self.last[(l, e)])
                if best is None or key < best[0]:
                    best = (key, l, e)
        return best[1], best[2]


class CrossLayer(Decay):
    """decay, with the chance of a unit of the layer about to run replaced by what the same
    token's previous layer predicts: decayed counts of (expert at layer l-1, expert at l)
    co-picks in one token, normalised per previous-layer expert."""

    def __init__(self, trace, capacity, half_life=8.0, mix=1.0):
        super().__init__(trace, capacity, half_life)
        self.layers = sorted(trace.header.unit_bytes)
        self.before = {b: a for a, b in zip(self.layers, self.layers[1:])}
        self.pairs = {}  # (layer, prev expert) → {expert: decayed count}
        self.seen = {}   # (layer, prev expert) → decayed count of that prev expert
        self.last_picks = {}
        self.predicted = {}  # expert of the next layer → chance
        self.next_layer = None
        self.mix = mix
        self.keep = 0.5 ** (1.0 / half_life)

    def touch(self, layer, experts, counts, r):
        super().touch(layer, experts, counts, r)
        if counts is not None:
            return
        prev = self.before.get(layer)
        if prev is not None and prev in self.last_picks:
            for a in self.last_picks[prev]:
                row = self.pairs.setdefault((layer, a), {})
                for b in row:
                    row[b] *= self.keep
                for b in experts:
                    row[b] = row.get(b, 0.0) + 1.0
                self.seen[(layer, a)] = self.seen.get((layer, a), 0.0) * self.keep + 1.0
        self.last_picks[layer] = list(experts)
        i = self.layers.index(layer)
        nxt = self.layers[(i + 1) % len(self.layers)]
        self.next_layer, self.predicted = nxt, {}
        if nxt == self.layers[0]:
            return
        k = len(experts)
        for a in experts:
            row, n = self.pairs.get((nxt, a)), self.seen.get((nxt, a), 0.0)
            if not row:
                continue
            for b, c in row.items():
                self.predicted[b] = self.predicted.get(b, 0.0) + c / n / k

    def victim(self, resident, layer, protected):
        best = None
        n = len(self.layers)
        cur = self.d.current
        for l, res in resident.items():
            steps = (self.d.position[l] - cur) % n or n
            for e in res:
                if l == layer and e in protected:
                    continue
                p = self.d.chance((l, e))
                if l == self.next_layer:
                    p = (1 - self.mix) * p + self.mix * min(1.0, self.predicted.get(e, 0.0))
                key = (-(math.inf if p <= 0 else steps + n * (1 / p - 1)), self.last[(l, e)])
                if best is None or key < best[0]:
                    best = (key, l, e)
        return best[1], best[2]


class PerLayerHalfLife(Lru):
    """decay's expected wait, but each layer's chance comes from the half-life (of several,
    1-32 tokens) whose predictions of that layer's picks scored best so far (Brier score,
    itself decayed): layers that drift fast forget fast, steady ones remember long."""

    HALF_LIVES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)

    def __init__(self, trace, capacity, score_memory=16.0, mode="best", density=False):
        super().__init__(trace, capacity)
        import numpy as np
        self.np = np
        h = trace.header
        self.layers = sorted(h.unit_bytes)
        self.position = {l: i for i, l in enumerate(self.layers)}
        self.k = h.n_expert_used
        self.keep = np.array([0.5 ** (1 / x) for x in self.HALF_LIVES])[:, None]
        self.score = {l: np.zeros((len(self.HALF_LIVES), h.n_expert)) for l in self.layers}
        self.loss = {l: np.zeros(len(self.HALF_LIVES)) for l in self.layers}
        self.loss_keep = 0.5 ** (1 / score_memory)
        self.chance = {l: np.zeros(h.n_expert) for l in self.layers}
        self.current = 0
        self.mode = mode
        self.density = density

    def touch(self, layer, experts, counts, r):
        super().touch(layer, experts, counts, r)
        np = self.np
        self.current = self.position[layer]
        sc = self.score[layer]
        if counts is not None:
            tokens = max(sum(counts.values()) / self.k, 1.0)
            for e in experts:
                sc[:, e] = np.minimum(1.0, counts[e] / tokens) / (1 - self.keep[:, 0])
        else:
            picked = np.zeros(sc.shape[1])
            picked[list(experts)] = 1.0
            pred = np.minimum(1.0, sc * (1 - self.keep))
            self.loss[layer] = self.loss[layer] * self.loss_keep + ((pred - picked) ** 2).sum(axis=1)
            sc *= self.keep
            sc[:, list(experts)] += 1.0
        pred = np.minimum(1.0, sc * (1 - self.keep))
        if self.mode == "best":
            self.chance[layer] = pred[int(np.argmin(self.loss[layer]))]
        else:
            w = np.exp(-(self.loss[layer] - self.loss[layer].min()))
            self.chance[layer] = (w[:, None] * pred).sum(axis=0) / w.sum()

    def victim(self, resident, layer, protected):
        best = None
        n = len(self.layers)
        for l, res in resident.items():
            steps = (self.position[l] - self.current) % n or n
            ch = self.chance[l]
            for e in res:
                if l == layer and e in protected:
                    continue
                p = ch[e]
                wait = math.inf if p <= 0 else (steps / p if self.density else steps + n * (1 / p - 1))
                key = (-wait, self.last[(l, e)])
                if best is None or key < best[0]:
                    best = (key, l, e)
        return best[1], best[2]


class NextPassOracle(Decay):
    """NOT online (a ceiling): decay, but units that their layer's next pass will pick are
    known and kept; how much one pass of foresight is worth."""

    def __init__(self, trace, capacity):
        super().__init__(trace, capacity)
        self.layers = sorted(trace.header.unit_bytes)
        self.picks = {(r.token, r.layer): set(r.experts) for r in trace.records if not r.prompt}
        self.token = None

    def touch(self, layer, experts, counts, r):
        super().touch(layer, experts, counts, r)
        self.token = None if r.prompt else r.token
        self.layer = layer

    def victim(self, resident, layer, protected):
        best = None
        n = len(self.layers)
        cur = self.d.current
        first = min(t for t, _ in self.picks) if self.token is None else None
        for l, res in resident.items():
            steps = (self.d.position[l] - cur) % n or n
            if self.token is None:
                upcoming = self.picks.get((first, l), set())
            else:
                upcoming = self.picks.get((self.token + (1 if l <= layer else 0), l), set())
            for e in res:
                if l == layer and e in protected:
                    continue
                wait = steps if e in upcoming else n + self.d.expected_wait((l, e))
                key = (-wait, self.last[(l, e)])
                if best is None or key < best[0]:
                    best = (key, l, e)
        return best[1], best[2]


class RankAware(Decay):
    """decay's expected wait; for a unit its layer's last pass picked, the chance is the mean
    of decay's and that layer's learned share of picks repeated at the next pass by their
    router-weight rank at the last pass (rank 0 repeats more: Qwen 48 % vs 28 % for rank 5)."""

    def __init__(self, trace, capacity, lift=False):
        super().__init__(trace, capacity)
        self.lift = lift
        k = trace.header.n_expert_used
        self.layers = sorted(trace.header.unit_bytes)
        self.rate = {l: [[0.5, 1.0] for _ in range(k)] for l in self.layers}
        self.rank = {l: {} for l in self.layers}  # expert → rank at the layer's last decoded pass

    def touch(self, layer, experts, counts, r):
        super().touch(layer, experts, counts, r)
        if counts is not None:
            return
        rate, picked = self.rate[layer], set(experts)
        for e, i in self.rank[layer].items():
            rate[i][1] += 1.0
            rate[i][0] += e in picked
        order = sorted(range(len(experts)), key=lambda i: -r.weights[i]) if r.weights else range(len(experts))
        self.rank[layer] = {experts[i]: j for j, i in enumerate(order) if j < len(rate)}

    def key(self, l, e):
        i = self.rank[l].get(e)
        if i is None:
            return super().key(l, e)
        n = len(self.layers)
        steps = (self.d.position[l] - self.d.current) % n or n
        hit, seen = self.rate[l][i]
        if self.lift:  # decay's chance scaled by this rank's repeat rate over the layer's mean
            rows = self.rate[l]
            mean = sum(h for h, _ in rows) / sum(c for _, c in rows)
            p = min(1.0, self.d.chance((l, e)) * (hit / seen) / mean)
        else:
            p = 0.5 * (self.d.chance((l, e)) + hit / seen)
        return (-(steps + n * (1 / p - 1)), self.last[(l, e)])


class Ucp:
    """Utility-based partitioning: per-layer shadow LRU stacks, decayed hit-by-depth
    histograms, a greedy byte allocation per token, evict from the layer most over it."""

    def __init__(self, trace, capacity, half_life=None, within="lru"):
        h = trace.header
        self.n_expert, self.k = h.n_expert, h.n_expert_used
        self.unit_bytes = h.unit_bytes
        self.layers = sorted(h.unit_bytes)
        self.capacity = capacity
        self.stack = {l: [] for l in self.layers}  # most recent first
        self.hist = {l: [0.0] * (h.n_expert + 1) for l in self.layers}
        self.half_life = half_life or 8.0
        self.keep = 0.5 ** (1.0 / self.half_life)  # per token (per pass of a layer)
        self.alloc = {l: capacity / len(self.layers) for l in self.layers}
        self.within = within
        self.d = DecayingFrequency(self.layers, h.n_expert_used, self.half_life)

    def touch(self, layer, experts, counts, r):
        self.d.picked(layer, experts, counts)
        st = self.stack[layer]
        hist = self.hist[layer]
        if counts is None:
            for i in range(len(hist)):
                hist[i] *= self.keep
            pos = {e: i for i, e in enumerate(st)}
            for e in experts:
                hist[pos.get(e, self.n_expert)] += 1.0
        picked = set(experts)
        self.stack[layer] = list(experts) + [e for e in st if e not in picked]
        if layer == self.layers[0]:
            self.allocate()

    def allocate(self):
        slots = {l: 0 for l in self.layers}
        left = self.capacity
        while True:
            best = None
            for l in self.layers:
                c, b = slots[l], self.unit_bytes[l]
                acc = 0.0
                for j in range(1, self.n_expert - c + 1):  # lookahead for non-concave curves
                    acc += self.hist[l][c + j - 1]
                    if j * b > left:
                        break
                    u = acc / (j * b)
                    if best is None or u > best[0]:
                        best = (u, l, j)
            if best is None or best[0] <= 0:
                break
            _, l, j = best
            slots[l] += j
            left -= j * self.unit_bytes[l]
        self.alloc = {l: slots[l] * self.unit_bytes[l] for l in self.layers}

    def victim(self, resident, layer, protected):
        best = None
        for l, res in resident.items():
            n = len(res) - (len(protected & res) if l == layer else 0)
            if n <= 0:
                continue
            over = len(res) * self.unit_bytes[l] - self.alloc[l]
            if best is None or over > best[0]:
                best = (over, l)
        l = best[1]
        res = resident[l]
        cands = [e for e in res if not (l == layer and e in protected)]
        if self.within == "decay":
            return l, max(cands, key=lambda e: self.d.expected_wait((l, e)))
        pos = {e: i for i, e in enumerate(self.stack[l])}
        return l, max(cands, key=lambda e: pos.get(e, 1 << 30))


POLICIES = {
    "lru": Lru,
    "decay": Decay,
    "ucp": Ucp,
    "rank": RankAware,
    "rank-lift": lambda t, c: RankAware(t, c, lift=True),
    "oracle-next-pass": NextPassOracle,
    "cal": Calibrated,
    "cross": CrossLayer,
    "hl-best": PerLayerHalfLife,
    "hl-mix": lambda t, c: PerLayerHalfLife(t, c, mode="mix"),
    "hl-density": lambda t, c: PerLayerHalfLife(t, c, mode="mix", density=True),
    "cross-half": lambda t, c: CrossLayer(t, c, mix=0.5),
    "ucp-decay": lambda t, c: Ucp(t, c, within="decay"),
}


def main(names):
    only = os.environ.get("TRACES", "qwen,gemma,gptoss").split(",")
    traces = {n: load_trace(p) for n, p in TRACES.items() if n in only}
    fracs = {}
    for n, t in traces.items():
        h = t.header
        for mb in SIZES_MB[n]:
            cap, mult = int(mb * 2**20), mb
            recs = run_order(t, cap)
            counted = [not r.prompt for r in recs]
            oh, om, _ = belady_hits([(r.layer, r.experts) for r in recs], counted, cap, h.unit_bytes)
            opt = oh / (oh + om)
            lh, lm = Sim(Lru(t, cap), cap, h.unit_bytes).run(recs)
            lru = lh / (lh + lm)
            line = [f"{n:6} {mult}MB lru {100*lru:5.1f} opt {100*opt:5.1f} half {100*(lru+opt)/2:5.1f} |"]
            for name in names:
                t0 = time.time()
                ph, pm = Sim(POLICIES[name](t, cap), cap, h.unit_bytes).run(recs)
                rate = ph / (ph + pm)
                frac = (rate - lru) / (opt - lru)
                fracs.setdefault(name, []).append(frac)
                line.append(f"{name} {100*rate:5.1f} ({100*frac:3.0f}%,{time.time()-t0:.1f}s)")
            print(" ".join(line), flush=True)
    for name, f in fracs.items():
        print(f"{name:12} min share {100*min(f):4.0f}%  mean {100*sum(f)/len(f):4.0f}%")


def table(paths: list[str]) -> None:
    """Hit rates of auto, lru, decay and the optimum at 0.5x-4x one token's picks (the engine's replay)."""
    from shardscope.engine.experts.replay import replay_one

    for path in paths or list(TRACES.values()):
        trace = load_trace(path)
        h = trace.header
        name = next((n for n, p in TRACES.items() if p == path), None)
        one = SIZES_MB[name][0] if name else h.n_expert_used * sum(h.unit_bytes.values()) / 2**20
        print(f"\n{path}: one token's picks {one:g} MiB")
        print("| policy | " + " | ".join(f"{x:g}x {one * x:,.0f} MiB" for x in MULTIPLES) + " |")
        print("|---|" + "---|" * len(MULTIPLES))
        for policy in ("auto", "decay", "lru", "optimal"):
            rates = [replay_one(trace, policy, int(one * x * 2**20)).expert_hit_rate for x in MULTIPLES]
            cells = [f"{100 * rate:.1f} %" for rate in rates]
            print(f"| {policy} | " + " | ".join(cells) + " |", flush=True)


def cost() -> None:
    """CPU per decoded token of the cache's decisions (what a live run spends in ExpertCache.access),
    per policy, replaying each public trace at one token's picks: auto's shadows on top of its order."""
    from shardscope.engine.experts.replay import replay_one

    for name, path in TRACES.items():
        trace = load_trace(path)
        n = len({r.token for r in trace.records if not r.prompt})
        cap = int(SIZES_MB[name][0] * 2**20)
        ms = {}
        for policy in ("lru", "decay", "auto"):
            t0 = time.process_time()
            replay_one(trace, policy, cap)
            ms[policy] = 1000 * (time.process_time() - t0) / n
        h = trace.header
        per_pick_us = (ms['auto'] - ms['decay']) / (len(h.unit_bytes) * h.n_expert_used) * 1000
        print(f"{name:6} {len(h.unit_bytes)} layers x top-{h.n_expert_used}: ms of CPU per decoded token "
              + ", ".join(f"{p} {v:.2f}" for p, v in ms.items())
              + f"; auto's shadows cost {ms['auto'] - ms['decay']:.2f} ms a token over decay "
              f"({per_pick_us:.0f} us per pick)", flush=True)


MULTIPLES = (0.5, 1.0, 1.5, 2.0, 4.0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--table"]:
        table(sys.argv[2:])
        sys.exit(0)
    if sys.argv[1:2] == ["--cost"]:
        cost()
        sys.exit(0)
    # the default: the kept candidates and the ceiling (ucp, cal, cross take minutes on Qwen here)
    main(sys.argv[1:] or ["decay", "hl-mix", "oracle-next-pass"])
