# Two commands from a fresh clone:  `make demo` runs the main job, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# transformers 5.x in a side folder, only to check that our checkpoints load there too
TF5 := .venv-tf5

.PHONY: demo test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml .ci/constraints.txt | $(BIN)/python
	$(BIN)/pip install -q -c .ci/constraints.txt torch==2.13.0 -e ".[dev]"
	touch $@

$(TF5)/.installed: .ci/tf5-requirements.txt | $(VENV)/.installed
	$(BIN)/pip install -q --target $(TF5) -r .ci/tf5-requirements.txt
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/bertkit info --preset mini

test: $(VENV)/.installed $(TF5)/.installed
	BERTKIT_TF5_PATH=$(abspath $(TF5)) $(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(TF5) *.egg-info
