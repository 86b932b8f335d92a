# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv at the repo root and install the project into it on first use.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The CPU build of torch 2.13.0 lies on disk on our development machines; on a GPU machine install your CUDA
# build of torch into .venv first (or pass TORCH=...) and this step keeps it.
TORCH  ?= torch==2.13.0

.PHONY: demo test test-fast test-slow lint clean install

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/electra demo --out runs/demo

# Every tier runs on all cores (pytest-xdist, one test process per core; each process that runs SLURM tests starts
# its own localhost cluster, on its own ports: tests/cluster/conftest.py). PYTEST_WORKERS=1 runs one test at a time.
PYTEST_WORKERS ?= auto
XDIST  := -n $(PYTEST_WORKERS)

# everything, the slowest 20 tests listed at the end
test: $(STAMP)
	$(PY) -m pytest $(XDIST) --durations=20 tests

# the fast tier: no fresh Python process, no end-to-end run
test-fast: $(STAMP)
	$(PY) -m pytest $(XDIST) -m "not slow" tests

# the slow tier: child processes (kills, kill storms, torch.distributed, fresh interpreters, W&B), whole toy studies,
# 5000 fuzzed inputs per reader (docs/reliability.md)
test-slow: $(STAMP)
	$(PY) -m pytest $(XDIST) -m slow tests

lint: $(STAMP)
	$(VENV)/bin/ruff check electra tests
	$(VENV)/bin/ruff format --check electra tests
	$(VENV)/bin/lint-imports

clean:
	rm -rf runs .pytest_cache
