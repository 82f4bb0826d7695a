"""The model file changes during a run: a clear stop, never a SIGBUS crash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

import pytest

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.stream.streaming_run import StreamingRun


@pytest.fixture
def model_copy(synthetic_model, tmp_path):
    path = tmp_path / "victim.gguf"
    shutil.copyfile(synthetic_model, path)
    return str(path)


def _streaming_settings(path: str, budget_mb: int | None = None) -> RunSettings:
    size_mb = os.path.getsize(path) / MIB
    return RunSettings(model_path=path, budget_mb=budget_mb or int(size_mb / 2), shard_mb=32,
                       prefetch_depth=1, n_gen=200, n_ctx=256)


def _run_until_error(run: StreamingRun, at_token: int, action) -> str:
    fired = threading.Event()

    def on_token(index, piece, dt):
        if index == at_token and not fired.is_set():
            fired.set()
            action()

    run.on_token = on_token
    with pytest.raises(ShardscopeError) as info:
        run.run()
    return str(info.value)


@pytest.mark.parametrize("budget_mb", [None, 4096], ids=["streaming", "fits"])
def test_truncation_by_another_process_stops_the_run(model_copy, budget_mb):
    writer = None

    def truncate_elsewhere():
        nonlocal writer
        code = f"f = open({model_copy!r}, 'r+b'); f.truncate({os.path.getsize(model_copy) // 3}); f.close()"
        writer = subprocess.Popen([sys.executable, "-c", code])

    run = StreamingRun(_streaming_settings(model_copy, budget_mb))
    try:
        message = _run_until_error(run, 3, truncate_elsewhere)
        assert "victim.gguf" in message and "truncating" in message
        assert writer.poll() is None, "the writer is held back while the model is mapped"
    finally:
        run.close()
    assert writer.wait(timeout=30) == 0  # released once the mapping is gone
    assert os.path.getsize(model_copy) < 200 * MIB
    maps = open("/proc/self/maps").read()
    assert "victim.gguf" not in maps, "no mapping of the model is left behind"


def test_deletion_is_reported(model_copy):
    run = StreamingRun(_streaming_settings(model_copy))
    try:
        message = _run_until_error(run, 2, lambda: os.unlink(model_copy))
        assert "deleted" in message
    finally:
        run.close()
