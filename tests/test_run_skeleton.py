"""The dense run and the expert run share one skeleton (engine/stream/run_skeleton.py).

One test per drift found between the two before they shared it: the ssd_mb_s time
base, the copy of the sample deque, the per-round sample filter, the file guard's
cadence, the layout checked against the file, and verify/bench opening runs through
open_run. Figures are checked against what the test reads from the kernel itself.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MB_S
from shardscope.engine.experts.expert_run import ExpertRun
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.measure.metrics import MetricsSample
from shardscope.engine.runs.run_factory import open_run
from shardscope.engine.stream.streaming_run import StreamingRun

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_moe(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("skeleton-moe") / "moe-100.gguf"
    write_synthetic_model(path, 100, moe=MoeSpec(16, 4, routing_skew=2.0), seed=3)
    return str(path)


@pytest.fixture
def moe_copy(small_moe, tmp_path) -> str:
    path = tmp_path / "victim-moe.gguf"
    shutil.copyfile(small_moe, path)
    return str(path)


def _moe_settings(path: str, **kw) -> RunSettings:
    values = dict(model_path=path, budget_mb=60, expert_cache_mb=34, n_gen=6, n_ctx=128)
    values.update(kw)
    return RunSettings(**values)


def test_ssd_rate_is_divided_by_the_decode_wall_time_in_an_expert_run(small_moe):
    """Time spent between tokens is decode time the disk had: the rate is read bytes ÷ wall time
    from the first token to the last (the expert run divided by summed token times before)."""
    proc = psutil.Process()
    marks = {}

    def on_token(index, piece, dt):
        if index == 0:
            marks["read0"], marks["t0"] = proc.io_counters().read_bytes, time.perf_counter()
        time.sleep(0.15)  # the callback's time is wall time, not token time

    with ExpertRun(_moe_settings(small_moe), on_token=on_token) as run:
        summary = run.run()
        read1, t1 = proc.io_counters().read_bytes, time.perf_counter()
    assert summary.read_mb_per_token > 0  # experts were read while decoding
    kernel = (read1 - marks["read0"]) / MB_S / (t1 - marks["t0"])
    assert summary.ssd_mb_s == pytest.approx(kernel, rel=0.25, abs=0.2)


def test_a_round_counts_only_its_own_samples(small_moe):
    """resident_weights_mb is the peak over *this* round's generating samples: an earlier
    round's (here a planted one) must not leak in (the dense run filtered, the expert run did not)."""
    with ExpertRun(_moe_settings(small_moe, n_gen=4)) as run:
        run.load()
        planted = {f.name: 0 for f in dataclasses.fields(MetricsSample) if f.default is dataclasses.MISSING}
        run.samples.append(MetricsSample(**{**planted, "t_s": -1.0, "resident_weights_mb": 99_999.0,
                                            "phase": "generating"}))
        summary = run.run()
    assert 0 < summary.resident_weights_mb < 1000


class _YieldingSample:
    """A timeline entry whose read gives the GIL away: the sampler thread appends right then."""

    t_s = -1.0
    resident_weights_mb = 0.0

    @property
    def phase(self) -> str:
        time.sleep(0)
        return "generating"


def test_the_summary_copies_the_sample_deque_before_reading_it(small_moe):
    """The sampler thread appends while the round's summary reads the timeline: iterating the
    deque itself raises "deque mutated during iteration" (the soak found it in the dense run;
    the expert run still iterated the deque). Entries that yield the GIL while being read, and
    a thread that appends whenever it gets it, make the race certain instead of rare."""
    done = threading.Event()

    def appender(samples):
        while not done.is_set():
            samples.append(_YieldingSample())
            time.sleep(0)

    with ExpertRun(_moe_settings(small_moe, n_gen=4)) as run:
        run.load()
        for _ in range(100):
            run.samples.append(_YieldingSample())
        thread = threading.Thread(target=appender, args=(run.samples,), daemon=True)
        thread.start()
        try:
            summary = run.run()
        finally:
            done.set()
            thread.join()
    assert summary.n_gen == 4


@pytest.mark.hang_bound
@pytest.mark.parametrize("kind", ["layers", "experts"])
def test_the_file_guard_is_polled_on_a_clock_for_both_run_kinds(kind, moe_copy, synthetic_model, tmp_path):
    """A deleted model is noticed within the guard's 20 ms cadence even when no layer runs
    (the expert run looked only at layer boundaries; the dense one in its loader)."""
    if kind == "layers":
        path = tmp_path / "victim-dense.gguf"
        shutil.copyfile(synthetic_model, path)
        run = open_run(RunSettings(model_path=str(path), budget_mb=200, shard_mb=32, prefetch_depth=1, n_gen=4))
    else:
        run = open_run(_moe_settings(moe_copy))
    with run:
        run.load()
        assert run.error is None
        os.unlink(run.model_path)
        # No layer runs here: only a clock-polled guard notices at all. 10 s bounds a hang
        # (expected: the guard's 20 ms cadence).
        deadline = time.perf_counter() + 10.0
        while run.error is None and time.perf_counter() < deadline:
            time.sleep(0.01)
        assert run.error and "deleted" in run.error


def test_a_model_replaced_during_an_expert_run_ends_it_with_one_message(moe_copy, small_moe, tmp_path):
    """Issue 19, finding 1: `mv other.gguf model.gguf` mid-run. Before, the streamer stopped
    quietly, every later graph was aborted, and a row of garbage (n_gen as asked, the
    replacement's size) was written with exit 0. Now the round raises the guard's message."""
    other = tmp_path / "other.gguf"
    shutil.copyfile(small_moe, other)
    with open(other, "ab") as f:
        f.write(b"\0" * 4096)  # a different file, as a user's replacement would be

    def on_token(index, piece, dt):
        if index == 2:
            os.replace(other, moe_copy)

    with ExpertRun(_moe_settings(moe_copy, n_gen=40), on_token=on_token) as run:
        with pytest.raises(ShardscopeError, match="victim-moe.gguf: model file was deleted during the run"):
            run.run()


@pytest.mark.parametrize("kind", ["layers", "experts"])
def test_a_file_swapped_between_planning_and_load_is_refused(kind, moe_copy, synthetic_model, tmp_path):
    """The run is planned from the file's layout; a different file at load is refused, for both
    kinds (only the dense run compared, and against a layout re-read from the new file)."""
    if kind == "layers":
        path = str(tmp_path / "victim-dense.gguf")
        shutil.copyfile(synthetic_model, path)
        run = StreamingRun(RunSettings(model_path=path, budget_mb=200, shard_mb=32, prefetch_depth=1))
    else:
        path = moe_copy
        run = ExpertRun(_moe_settings(path))
    other = tmp_path / "other.gguf"
    shutil.copyfile(path, other)
    with open(other, "ab") as f:
        f.write(b"\0" * 4096)
    os.replace(other, path)
    with run:
        with pytest.raises(ShardscopeError, match="file changed since its layout was read"):
            run.load()


def test_verify_and_every_bench_open_runs_through_open_run():
    """One door: what verify checks and benches measure is the run `bench` would open."""
    direct = re.compile(r"\b(StreamingRun|ExpertRun)\(")
    sources = [ROOT / "engine" / "runs" / "verify.py", *sorted((ROOT / "bench").glob("*.py"))]
    offenders = [str(p.relative_to(ROOT)) for p in sources if direct.search(p.read_text())]
    assert offenders == []


def test_both_run_kinds_inherit_the_skeleton_and_write_no_round_of_their_own():
    from shardscope.engine.stream.run_skeleton import RunSkeleton

    for cls in (StreamingRun, ExpertRun):
        assert issubclass(cls, RunSkeleton)
        for name in ("_round", "_figures", "load", "close", "stop", "apply", "_watch_file"):
            assert name not in vars(cls), f"{cls.__name__} redefines {name}"


def test_every_live_knob_names_a_setter_its_run_kinds_have():
    """apply() is one loop over the changed knobs: each live knob names the run's method that
    takes it, and every run kind that uses the knob has that method."""
    from shardscope.engine.knobs.knobs import KNOBS

    for name, spec in KNOBS.items():
        if not spec.live:
            continue
        assert spec.setter, f"{name} is live but names no setter"
        for cls in (StreamingRun, ExpertRun):
            if spec.streams in ("", cls.streams):
                assert callable(getattr(cls, spec.setter, None)), f"{cls.__name__} has no {spec.setter} for {name}"


def test_the_cli_ends_an_expert_run_whose_model_is_replaced_with_exit_2(moe_copy, small_moe, tmp_path):
    """Issue 19, finding 1, as the user ran it: `mv other.gguf v.gguf` while bench runs."""
    import subprocess
    import threading as th

    other = tmp_path / "other.gguf"
    shutil.copyfile(small_moe, other)
    with open(other, "ab") as f:
        f.write(b"\0" * 4096)
    out = tmp_path / "v.csv"
    proc = subprocess.Popen([sys.executable, "-m", "shardscope.engine.cli.cli", "bench", "--quiet", "--model", moe_copy,
                             "--budget-mb", "60", "--expert-cache-mb", "34", "--tokens", "200", "--n-ctx", "256",
                             # an emulated 50 MB/s disk keeps the run going past the replacement
                             "--ssd-mb-s", "50", "--csv", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def replace_once_streaming() -> None:
        """Replace the model once the run is streaming it — the child maps the file and has read
        4 MiB more since (from /proc/<pid>/maps and /io) — not after a fixed delay that a fast
        machine outruns."""
        child, mapped_at = psutil.Process(proc.pid), None
        deadline = time.monotonic() + 240  # hang bound
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                read = child.io_counters().read_bytes
                if mapped_at is None and os.path.realpath(moe_copy) in Path(f"/proc/{proc.pid}/maps").read_text():
                    mapped_at = read
                if mapped_at is not None and read - mapped_at >= 4 * 2**20:
                    os.replace(other, moe_copy)
                    return
            except (psutil.Error, OSError):
                return
            time.sleep(0.02)

    timer = th.Thread(target=replace_once_streaming, daemon=True)
    timer.start()
    stdout, stderr = proc.communicate(timeout=300)
    timer.join()
    assert not other.exists(), "the run ended before it streamed: " + stdout + stderr
    assert proc.returncode == 2, stdout + stderr
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "victim-moe.gguf" in lines[0] and "Traceback" not in stderr, stderr
    assert not out.exists()  # no row from a run that read another file
