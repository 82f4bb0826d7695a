"""Every charted and written figure of a run, next to a source the engine does not compute.

``shardscope bench --verify`` and tests/test_cross_checks.py run through here. The
independent sources: a second process (engine/measure/outside_watch.py) reading this
process's /proc/<pid>/io, /status and /smaps and the model's page-cache residency
through its own mapping; /proc/diskstats for the backing device (device-wide, so
only a bound on a shared machine); llama.cpp's own perf counters
(``llama_perf_context``). Every timeline sample sits between two outside readings
taken just before and just after it, so a difference is either the engine's or
something that moved in between, and the report says which share of points agree.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.platform_calls import linux_only
from shardscope.engine.base.quantity_text import plural
from shardscope.engine.base.units import MB_S, MIB
from shardscope.engine.knobs.knobs import EXPERT_KNOBS, LAYER_KNOBS, describe
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.measure.metric_registry import BY_NAME, verify_label
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.runs.verify_experts import expert_checks, residency_reading
from shardscope.engine.runs.verify_report import Check, VerifyReport, relative_difference
from shardscope.engine.runs.verify_timing import token_time_note, token_time_rel, ttft_note, ttft_rel
from shardscope.engine.stream.run_summary import RunSummary

READAHEAD_BYTES = 8 * MIB  # what a read may pull in past its end (read_ahead_kb on this VM's disk)
SMAPS_EVERY = 5  # smaps walks every page of the mapping: read it at 2 Hz, not 10
_WATCH_SCRIPT = Path(__file__).resolve().parents[1] / "measure" / "outside_watch.py"


def _weights(reply: dict) -> int:
    """Model bytes in RAM seen from outside: the file's page cache (mincore on the watcher's own
    mapping) plus the run's own anonymous pages inside the model's range (smaps), when it has any."""
    return reply["cache_bytes"] + (reply.get("anon_rss") or 0)


class OutsideWatcher:
    """The second process, asked for a reading over a pipe (about a millisecond)."""

    def __init__(self, pid: int, model_path: str):
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", str(_WATCH_SCRIPT), str(pid), model_path],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self._lock = threading.Lock()

    def _ask(self, line: str) -> dict:
        with self._lock:
            try:
                self._proc.stdin.write(line + "\n")
                self._proc.stdin.flush()
                reply = self._proc.stdout.readline()
            except (BrokenPipeError, ValueError):
                reply = ""
        if not reply:
            raise ShardscopeError(f"the outside watcher ({_WATCH_SCRIPT.name}) stopped answering")
        return json.loads(reply)

    def set_mapping(self, start: int, end: int, file_offset: int) -> None:
        self._ask(f"map {start} {end} {file_offset}")

    def read(self, smaps: bool = False) -> dict:
        return self._ask("s" if smaps else "r")

    def resident_bytes(self, spans: list[tuple[int, int]]) -> int:
        """mincore, in the watcher's own mapping, over these file ranges."""
        if not spans:
            return 0
        return self._ask("ranges " + " ".join(f"{lo} {hi}" for lo, hi in spans))["resident_bytes"]

    def close(self) -> None:
        try:
            self._proc.stdin.close()
            self._proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()


def _bracket(engine: float, a: float, b: float, floor: float = 0.0) -> float:
    """0 when the engine's value lies between two outside readings taken just before and
    just after it; else its relative distance from the nearer one."""
    lo, hi = min(a, b), max(a, b)
    if lo <= engine <= hi:
        return 0.0
    return relative_difference(engine, lo if engine < lo else hi, floor)


def _bracket_span(engine: float, arriving: float, a: float, b: float) -> float:
    """``_bracket`` for a level the engine knows as a span: its books, and up to ``arriving`` more
    that reads under way are putting into the mapping as they land. 0 when the span meets the two
    readings' range; else the distance of its nearer end, relative."""
    lo, hi = min(a, b), max(a, b)
    if engine + arriving < lo:
        return relative_difference(engine + arriving, lo)
    return _bracket(engine, a, b) if engine > hi else 0.0


def _above(engine: float, a: float, b: float) -> float:
    """How far the engine's value lies above a subset counted before (a) and after (b)
    it: negative only when it is below both readings, 0 inside them."""
    lo, hi = min(a, b), max(a, b)
    if engine < lo:
        return relative_difference(engine, lo)
    return max(0.0, relative_difference(engine, hi))


@dataclass
class _Pair:
    """An engine sample between two outside readings (``before`` is None for the first)."""

    sample: MetricsSample
    before: dict | None
    after: dict


def verified_run(settings: RunSettings, *, cut_budget_mb: float | None = None, cut_at_token: int = 4,
                 label: str = "", on_sample: Callable[[MetricsSample], None] | None = None,
                 ) -> tuple[VerifyReport, list[MetricsSample]]:
    """One run with every figure paired to an outside reading; the budget optionally cut mid-run."""
    import llama_cpp

    pairs: list[_Pair] = []
    token_reads: dict[str, dict] = {}
    perf_at_first: dict[str, float] = {}
    durations: dict[int, float] = {}
    watcher: OutsideWatcher | None = None
    finished = False
    pending: dict = {}
    n_gen = settings.n_gen

    def before_sample() -> None:
        if not finished:
            # Own slots hold weights no mapping of the file shows: their Rss comes from smaps, every time.
            own_slots = run.slots is not None  # the skeleton opened them at load
            pending["before"] = watcher.read(smaps=own_slots or len(pairs) % SMAPS_EVERY == 0)

    def paired(sample: MetricsSample) -> None:
        if finished:  # close() samples once more after the run; the watcher is gone then
            return
        if not pending.get("hooked"):  # from the sampler's first sample: its 1 s windows start there
            pending["hooked"] = True
            run.sampler.before_each_sample(before_sample)
        before = pending.pop("before", None)
        pairs.append(_Pair(sample, before, watcher.read(smaps=before is not None and "smaps_rss" in before)))
        if on_sample:
            on_sample(sample)

    def on_token(index: int, piece: str, dt: float) -> None:
        if index == 0:
            t0 = time.perf_counter()
            token_reads["first"] = dict(watcher.read(), lag=time.perf_counter() - t0)
            perf = llama_cpp.llama_perf_context(run.session._ctx)
            perf_at_first["t_p_eval_ms"] = perf.t_p_eval_ms
        else:
            durations[index] = dt
        if index == n_gen - 1:
            t0 = time.perf_counter()
            token_reads["last"] = dict(watcher.read(), lag=time.perf_counter() - t0)
        if cut_budget_mb is not None and index == cut_at_token:
            run.apply(run.settings.with_changes(budget_mb=cut_budget_mb))

    # Through open_run, as bench opens it: verify checks the run the user would get.
    run = open_run(settings, on_sample=paired, on_token=on_token)
    with run:
        run.load()
        m = run.mapping
        if m is None or linux_only("outside_watch"):  # macOS: one line, no traceback (docs/macos.md)
            why = linux_only("outside_watch") or "no /proc mapping of the model to check against"
            raise ShardscopeError(f"--verify needs Linux: {why}")
        watcher = OutsideWatcher(os.getpid(), run.model_path)
        try:
            watcher.set_mapping(m.start, m.end, m.file_offset)
            hooked_at_start = run.session.hook_active
            # The first sample's lower reading: the counters only grow between this and it.
            pending["before"] = watcher.read(smaps=run.slots is not None)
            summary = run.run()
            # A budget cut rebuilds llama.cpp's context with the layer hook: its counters restart.
            rebuilt = run.session.hook_active and not hooked_at_start
            experts = run.streams == "experts"
            residency = residency_reading(run, watcher) if experts else None
            allowance_mb = (_moving_bytes(run) + READAHEAD_BYTES) / MIB
            perf = llama_cpp.llama_perf_context(run.session._ctx)
            perf_end = {"n_eval": perf.n_eval, "t_eval_ms": perf.t_eval_ms}
            samples = list(run.samples)
            window = run.sampler.window
        finally:
            finished = True
            watcher.close()
    report = VerifyReport(label=label or _label(summary, settings, cut_budget_mb, cut_at_token), summary=summary)
    report.checks = _compare(summary, pairs, token_reads, perf_at_first, perf_end, durations, window,
                             allowance_mb, rebuilt)
    if residency is not None:
        report.checks += expert_checks(summary, run, token_reads, residency)
    return report, samples


def _source(name: str) -> str:
    """The independent source the metric registry declares for a figure."""
    return BY_NAME[name].source


def _moving_bytes(run) -> int:
    """The most weight bytes that can be arriving at once: what a level may move within one bracket."""
    if run.streams == "experts":
        # Every loader busy with the largest expert, and a layer of guesses beside them.
        return (4 + run.moe.n_expert_used) * run.moe.max_unit_bytes
    return run.controller.moving_bytes


def _label(summary: RunSummary, settings: RunSettings, cut_budget_mb: float | None, cut_at: int) -> str:
    budget = (f"budget {settings.budget_mb:g} → {cut_budget_mb:g} MiB after token {cut_at}"
              if cut_budget_mb is not None else f"budget {summary.budget_mb:.0f} MiB")
    knobs = EXPERT_KNOBS if getattr(summary, "expert_policy", "") else LAYER_KNOBS
    return f"{describe(summary, knobs)}, {budget}, {plural(summary.n_gen, 'token')}"


def _compare(summary: RunSummary, pairs: list[_Pair], token_reads: dict, perf_first: dict, perf_end: dict,
             durations: dict[int, float], window: int, allowance_mb: float, rebuilt: bool) -> list[Check]:
    checks: list[Check] = []
    n_decoded = summary.n_gen - 1
    first, last = token_reads.get("first"), token_reads.get("last")

    # -- disk reads -------------------------------------------------------------------
    if first and last and n_decoded > 0:
        outside_mb_tok = (last["read_bytes"] - first["read_bytes"]) / MIB / n_decoded
        checks.append(Check(verify_label("read_mb_per_token", "CSV"), _source("read_mb_per_token"),
                            summary.read_mb_per_token, outside_mb_tok,
                            [relative_difference(summary.read_mb_per_token, outside_mb_tok, floor=1.0)], "MiB"))
        wall = last["t"] - first["t"]
        outside_bytes = (last["read_bytes"] - first["read_bytes"]) / MB_S
        outside_rate = outside_bytes / wall if wall > 0 else math.nan
        # First token to last, each side by its own clock, apart by each reading's duration + the
        # callback's bookkeeping (10 ms): the engine must lie within the windows that skew allows.
        skew = first.get("lag", 0.0) + last.get("lag", 0.0) + 0.010
        bounds = [outside_bytes / w if w > 0 else math.inf for w in (wall + skew, wall - skew)]
        checks.append(Check(verify_label("ssd_mb_s", "CSV"), _source("ssd_mb_s"),
                            summary.ssd_mb_s, outside_rate,
                            [_bracket(summary.ssd_mb_s, *bounds, floor=10.0)], "MB/s (10^6 B/s)"))
        if first.get("disk_read_bytes") is not None and last.get("disk_read_bytes") is not None:
            device_mb = (last["disk_read_bytes"] - first["disk_read_bytes"]) / MIB
            process_mb = (last["read_bytes"] - first["read_bytes"]) / MIB
            checks.append(Check("read MiB while decoding", _DISKSTATS,
                                process_mb, device_mb,
                                [relative_difference(process_mb, device_mb, floor=n_decoded * 1.0)],
                                "MiB", relation="≤"))
        else:
            checks.append(_not_checked("read MiB while decoding", _DISKSTATS,
                                       "no /proc/diskstats line for the model's block device"))
    else:
        why = "no decoded token (the first token is the prompt pass)" if n_decoded <= 0 else \
            "no outside reading at the first and last token"
        checks.append(_not_checked(verify_label("read_mb_per_token", "CSV"), _source("read_mb_per_token"), why))
        checks.append(_not_checked(verify_label("ssd_mb_s", "CSV"), _source("ssd_mb_s"), why))

    gen = [p for p in pairs if p.sample.phase == "generating" and p.before is not None]
    if not gen:
        why = "no sample while generating (the run ended before the sampler's first tick)"
        for name, label in (("read_mb_total", "timeline"), ("ssd_mb_s", "timeline, 1 s window"),
                            ("resident_weights_mb", "timeline"), ("rss_mb", "timeline")):
            checks.append(_not_checked(verify_label(name, label), _source(name), why))
        checks.append(_not_checked("resident_weights_mb vs mapped (timeline)",
                                   "smaps Rss of the mapping, another process", why))
        checks.append(_not_checked("resident_weights_mb (CSV, peak)", _source("resident_weights_mb"), why))
    else:
        checks += _series_checks(pairs, gen, window, allowance_mb)
        # A peak is one instant: the engine's sample may catch a transient (a load landing
        # before an eviction) that no outside reading saw, or miss one that an outside
        # reading caught; the two peaks may differ by what moves within one bracket. Each
        # sample lies between the readings just before and after it, so the highest sample
        # lies between the highest of the lower readings and the highest of the upper ones:
        # a budget cut between a sample's two readings (the full model before, the cut level
        # after) puts only the upper end at the old level.
        peak = summary.resident_weights_mb
        brackets = [(_weights(p.before) / MIB, _weights(p.after) / MIB) for p in _peak_samples(gen, peak)]
        checks.append(peak_check(peak, brackets, allowance_mb))

    # -- llama.cpp's own counters -------------------------------------------------------
    n_eval, t_eval_ms = perf_end.get("n_eval", 0), perf_end.get("t_eval_ms", 0.0)
    if not (n_eval > 0 and t_eval_ms > 0):
        checks.append(_not_checked("avg_ts (CSV)", _source("avg_ts"), "llama.cpp timed no decoded token"))
    else:
        # After a rebuilt context llama.cpp counts from there: compare the tokens it
        # counted, the last n_eval ones.
        ours = [durations[i] for i in sorted(durations)][-n_eval:]
        engine_ts = len(ours) / sum(ours) if ours and sum(ours) > 0 else math.nan
        llama_ts = n_eval / (t_eval_ms / 1000.0)
        figure_ts = engine_ts if rebuilt else summary.avg_ts
        checks.append(Check(f"tok/s, the {n_eval} tokens after the cut" if rebuilt else "avg_ts (CSV)",
                            _source("avg_ts"), figure_ts, llama_ts,
                            [token_time_rel(figure_ts, llama_ts)], "tok/s",
                            note=token_time_note(figure_ts, llama_ts)))
        checks.append(Check("decoded tokens", "llama_perf_context n_eval", float(n_decoded), float(n_eval),
                            [] if rebuilt else [relative_difference(n_decoded, n_eval)], "tokens",
                            note="context rebuilt at the budget cut: llama.cpp counts from there" if rebuilt else ""))
    if "t_p_eval_ms" in perf_first and perf_first["t_p_eval_ms"] > 0:
        prompt_ms = perf_first["t_p_eval_ms"]
        checks.append(Check("ttft_ms (CSV)", _TTFT_SOURCE, summary.ttft_ms, prompt_ms,
                            [ttft_rel(summary.ttft_ms, prompt_ms)], "ms",
                            note=ttft_note(summary.ttft_ms, prompt_ms)))
    else:
        checks.append(_not_checked("ttft_ms (CSV)", _TTFT_SOURCE, "llama.cpp timed no prompt pass"))
    return checks


_DISKSTATS = "/proc/diskstats of the backing device (device-wide: other processes' reads too)"
_TTFT_SOURCE = "llama_perf_context t_p_eval_ms (prompt pass)"


def _not_checked(figure: str, source: str, why: str) -> Check:
    """A pair the run gave nothing to compare: listed, NOT CHECKED, with the reason."""
    return Check(figure, source, math.nan, math.nan, [], note=why)


def peak_check(peak: float, brackets: list[tuple[float, float]], allowance_mb: float) -> Check:
    """The row's peak against the outside readings (before, after) of the samples it was taken over."""
    low = max(min(a, b) for a, b in brackets)
    high = max(max(a, b) for a, b in brackets)
    nearest = min(max(peak, low), high)
    return Check("resident_weights_mb (CSV, peak)", "max of mincore on another process's mapping "
                 "(+ smaps Rss of the run's own pages)",
                 peak, nearest, [_bracket(peak, low, high, floor=1.0)], "MiB",
                 allowance_mb=allowance_mb, excess_mb=abs(peak - nearest), single_instant=True,
                 note=f"outside peak {low:.0f}–{high:.0f} MiB (lower and upper readings), "
                      f"{abs(peak - nearest):.0f} MiB beyond (≤ {allowance_mb:.0f} MiB allowed: "
                      f"loads in flight + readahead)")


def _peak_samples(gen: list[_Pair], peak: float) -> list[_Pair]:
    """The generating samples the row's peak was taken over. The row is summed up as the last
    token ends, from the samples in hand then; on a busy machine a sample is still being read at
    that moment (samples came 1.5-2 s apart), lands after the row was made, and its outside
    readings then raised the outside peak by what the last token's loads added (68.6 vs 78.6 MiB
    in issue 28). The summary's samples are the first ones, in order, up to the one that reaches
    its peak; the later ones are the timeline's, checked there."""
    top = -math.inf
    for i, p in enumerate(gen):
        top = max(top, p.sample.resident_weights_mb)
        if round(top, 1) >= peak:
            return gen[:i + 1]
    return gen


def _nothing_read(gen: list[_Pair]) -> str:
    """Why the cumulative pair has no point: what the outside counter did over the generating samples."""
    if len(gen) < 2:
        return "one sample while generating: no later one to compare with the first"
    moved = gen[-1].after["read_bytes"] - gen[0].before["read_bytes"]
    return (f"nothing read while generating: /proc/<pid>/io moved {moved} B over {len(gen)} samples "
            f"({gen[-1].after['t'] - gen[0].before['t']:.1f} s)")


def _series_checks(pairs: list[_Pair], gen: list[_Pair], window: int, allowance_mb: float) -> list[Check]:
    """The timeline's figures at every sample while generating, each between two outside readings."""
    checks = []
    mib = MIB
    base = gen[0]
    points = []
    for p in gen[1:]:
        engine = p.sample.read_mb_total - base.sample.read_mb_total
        lo = (p.before["read_bytes"] - base.after["read_bytes"]) / mib
        hi = (p.after["read_bytes"] - base.before["read_bytes"]) / mib
        # Every point the outside saw a read by: an expert run reads ~1 MiB a token, and a floor of
        # 32 MiB (one dense shard) left such runs with no point at all (issue 52: 28 MiB decoded, "0 = 0").
        if hi > 0:
            points.append((engine, lo, hi))
    checks.append(Check(verify_label("read_mb_total", "timeline"), _source("read_mb_total"),
                        points[-1][0] if points else math.nan, points[-1][2] if points else math.nan,
                        [_bracket(e, lo, hi, floor=1.0) for e, lo, hi in points], "MiB",
                        outside_lo=points[-1][1] if points else math.nan,
                        note="" if points else _nothing_read(gen)))
    rates = []
    index = {id(p): i for i, p in enumerate(pairs)}
    windows = 0
    for p in gen:
        # The sampler's rate at sample i runs from sample max(0, i − window) (its history holds
        # window + 1 samples), whatever that one's phase: a run shorter than its window still has one.
        i = index[id(p)]
        old = pairs[max(0, i - window)]
        if old is p or old.before is None:
            continue
        windows += 1
        slow = (p.before["read_bytes"] - old.after["read_bytes"]) / MB_S / (p.after["t"] - old.before["t"])
        fast = (p.after["read_bytes"] - old.before["read_bytes"]) / MB_S / max(p.before["t"] - old.after["t"], 1e-6)
        if fast > 0:  # a window the outside saw a read in (a floor of 10 MB/s left expert runs none)
            rates.append((p.sample.ssd_mb_s, slow, fast))
    checks.append(Check(verify_label("ssd_mb_s", "timeline, 1 s window"), _source("ssd_mb_s"),
                        rates[-1][0] if rates else math.nan, rates[-1][2] if rates else math.nan,
                        [_bracket(e, lo, hi, floor=1.0) for e, lo, hi in rates], "MB/s (10^6 B/s)",
                        outside_lo=rates[-1][1] if rates else math.nan,
                        note="" if rates else (f"none of the {windows} windows of {window} samples while generating "
                                               "saw a read from outside" if windows else
                                               "no sample while generating with an outside reading before its window")))

    def read_around(key: str) -> list[_Pair]:
        return [p for p in gen if p.before.get(key) is not None and p.after.get(key) is not None]

    def level(field: str, key: str, scale: float = mib):
        return [(getattr(p.sample, field), p.before[key] / scale, p.after[key] / scale) for p in read_around(key)]

    def landing(key: str) -> list[float]:
        """level()'s points' reads landing in the mapping as the engine read its books (MiB)."""
        return [p.sample.arriving_weights_mb for p in read_around(key)]

    def beyond(points) -> float:
        return max((max(min(a, b) - e, e - max(a, b), 0.0) for e, a, b in points), default=0.0)

    def allowed(points) -> str:
        return (f"every point within {allowance_mb:.0f} MiB of the readings around it (loads in flight + "
                f"readahead): farthest {beyond(points):.0f} MiB")

    for p in gen:
        p.before["weights_bytes"], p.after["weights_bytes"] = _weights(p.before), _weights(p.after)
    cache = level("resident_weights_mb", "weights_bytes")
    checks.append(Check(verify_label("resident_weights_mb", "timeline"), _source("resident_weights_mb"),
                        cache[-1][0], max(cache[-1][1:]),
                        [_bracket_span(e, r, a, b) for (e, a, b), r in zip(cache, landing("weights_bytes"))], "MiB",
                        outside_lo=min(cache[-1][1:]), allowance_mb=allowance_mb, excess_mb=beyond(cache),
                        note=allowed(cache)) if cache else
                  _not_checked(verify_label("resident_weights_mb", "timeline"), _source("resident_weights_mb"),
                               "no mincore reading from the outside process"))
    smaps = level("resident_weights_mb", "smaps_rss")
    checks.append(Check("resident_weights_mb vs mapped (timeline)", "smaps Rss of the mapping, another process",
                        smaps[-1][0] if smaps else math.nan, smaps[-1][2] if smaps else math.nan,
                        [_above(e + r, a, b) for (e, a, b), r in zip(smaps, landing("smaps_rss"))], "MiB", relation="≥",
                        allowance_mb=allowance_mb, excess_mb=beyond(smaps),
                        note=("cached, not yet mapped: " + allowed(smaps)) if smaps else "smaps not readable"))
    rss = level("rss_mb", "vmrss")
    checks.append(Check(verify_label("rss_mb", "timeline"), _source("rss_mb"),
                        rss[-1][0], max(rss[-1][1:]), [_bracket(e, a, b) for e, a, b in rss], "MiB",
                        outside_lo=min(rss[-1][1:]), allowance_mb=allowance_mb, excess_mb=beyond(rss),
                        note=allowed(rss)) if rss else
                  _not_checked(verify_label("rss_mb", "timeline"), _source("rss_mb"), "VmRSS not readable"))
    return checks
