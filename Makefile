# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv at the repo root and install the project into it on first use.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The CPU build of torch 2.13.0 lies on disk on our development machines; on a GPU machine install your CUDA
# build of torch into .venv first (or pass TORCH=...) and this step keeps it.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-slow lint clean install

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/electra demo --out runs/demo

test: $(STAMP)
	$(PY) -m pytest tests

# the long tests only (kill storms, 5000 fuzzed inputs per reader, two-process runs): docs/reliability.md
test-slow: $(STAMP)
	$(PY) -m pytest -m slow tests

lint: $(STAMP)
	$(VENV)/bin/ruff check electra tests

clean:
	rm -rf runs .pytest_cache
