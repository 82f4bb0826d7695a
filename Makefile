# Two commands a newcomer needs: `make run` (the workbench on the bundled model)
# and `make test`. Both create or reuse .venv; llama-cpp-python compiles from
# source the first time (about 5 minutes on 2 cores), later runs reuse it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.shardscope-installed

.PHONY: run test bench venv clean-venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m app

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/overhead.py
	$(PY) bench/streaming_efficiency.py
	$(PY) bench/pinned_vs_lru.py
	$(PY) bench/gui_responsiveness.py

clean-venv:
	rm -rf $(VENV)
