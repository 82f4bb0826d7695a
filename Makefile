# Two commands a newcomer needs: `make run` (the workbench on the bundled model)
# and `make test`. Both create or reuse .venv; llama-cpp-python compiles from
# source the first time (about 12 minutes on 2 cores with downloads), later runs reuse it. Both say
# what they are doing while it compiles (PIP_VERBOSE=-v for the compiler's lines).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.shardscope-installed
# The lint step of `make test` and `make check`, run first: it takes seconds, and a lint error
# fails the run (pyproject.toml's [tool.ruff] says what it checks).
LINT := $(PY) -m ruff check .

.PHONY: run test check bench bench-full venv clean-venv

venv: $(STAMP)

# PIP_VERBOSE=-v shows every CMake/compiler line of the llama.cpp build instead of pip's spinner.
PIP_VERBOSE ?=

$(STAMP): pyproject.toml setup.py
	@echo "==> Setting up $(VENV) (first time only; later runs reuse it)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar on --upgrade pip
	@echo "==> Installing shardscope and its dependencies."
	@echo "    llama-cpp-python compiles llama.cpp from source: expect about 12 minutes on 2 cores with downloads"
	@echo "    with no new output while 'Building wheel for llama-cpp-python' spins"
	@echo "    (make PIP_VERBOSE=-v $(MAKECMDGOALS) shows the compiler's progress)."
	$(PY) -m pip install --progress-bar on $(PIP_VERBOSE) -e '.[test]'
	touch $(STAMP)
	@echo "==> $(VENV) ready"

run: $(STAMP)
	@echo "==> Starting the workbench (shardscope gui) on the bundled model"
	$(PY) -m shardscope.app

# The whole suite, then the tests marked io_paths again on the portable I/O path (the one macOS
# takes): each asserts which path ran, and pytest's last line counts them (tests/conftest.py).
test: $(STAMP)
	@echo "==> Running the test suite: it streams real models, 10 to 20 minutes on a 2-core machine"
	@echo "    (make check: the fast tier, under 3 minutes, for inner loops)"
	$(LINT)
	$(PY) -m pytest -q
	@echo "==> The streaming, residency, cross-check and expert tests again with SHARDSCOPE_IO=portable"
	SHARDSCOPE_IO=portable $(PY) -m pytest -q -m io_paths

# The fast tier: units, decisions, parsing, layering; no model streaming (no heavy/slow tests).
check: $(STAMP)
	@echo "==> The fast tier: no model streaming (make test runs everything)"
	$(LINT)
	$(PY) -m pytest -q -m "not heavy and not slow"

# Benchmarks with goals (bench/README.md), run from the repo root as modules; each prints its
# figure against its goal. bench: the quick ones (minutes); bench-full: every goal (hours, GBs of disk).
bench: $(STAMP)
	$(PY) -m bench.goals.layout_cache_reopen
	$(PY) -m bench.goals.chart_append
	$(PY) -m bench.goals.overhead
	$(PY) -m bench.goals.streaming_efficiency
	$(PY) -m bench.goals.pinned_vs_lru
	$(PY) -m bench.goals.gui_responsiveness

bench-full: bench
	$(PY) -m bench.goals.ssd_emulation_rate
	$(PY) -m bench.goals.stop_latency
	$(PY) -m bench.goals.prompt_batches
	$(PY) -m bench.goals.engine_cost
	$(PY) -m bench.goals.moe_streaming
	$(PY) -m bench.goals.window_cost
	$(PY) -m bench.goals.io_paths --dense-mb 4096
	$(PY) -m bench.goals.trunk_split
	$(PY) -m bench.goals.hash_prefetch
	$(PY) -m bench.goals.gui_session_drift
	$(PY) -m bench.goals.soak
	$(PY) -m bench.goals.moe_scale

clean-venv:
	rm -rf $(VENV)
