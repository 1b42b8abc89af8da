# rlvr — every target bootstraps its own environment (.venv) on a fresh machine, exactly from the
# hashed lock (requirements.lock).
#   make train TASK=email [ARGS="key=value ..."]    make test    make bench    make lock
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TASK ?= email
ARGS ?=
LOCK := requirements.lock
# Local wheel folder: this kind of machine keeps the CPU build of torch there (the lock pins it).
WHEELS ?= /opt/wheels
# uv installs the lock: parallel, cached, hash-checked. Bootstrapped once a machine with pip.
UV_VERSION := 0.13.8
UV_HOME := $(HOME)/.cache/rlvr/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv
# The lock covers the default CPU install and the dev/test extras, for CPython 3.11 on x86-64 Linux.
LOCK_FLAGS := --extra dev --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --find-links $(WHEELS) \
  --no-emit-package llama-cpp-python
# llama.cpp: the sdist (hash-pinned here: pip builds it, so it stays out of the lock) is compiled
# portable — the native build crashes in AMX kernels here and OpenMP slows the server thread
# (design.md §3). The wheel is cached per flag set, so it is built once a machine.
LLAMA_VERSION := 0.3.36
LLAMA_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
LLAMA_WHEELS := $(HOME)/.cache/rlvr/wheels/llama-cpp-$(LLAMA_VERSION)-portable
# Test workers: pytest-xdist processes (auto = one per core).
WORKERS ?= auto

.PHONY: setup lock train test test-fast lint bench preflight clean

setup: $(STAMP)

$(UV):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=python3.x (3.11+)"; exit 2; }
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q uv==$(UV_VERSION)

$(LLAMA_WHEELS)/.built: | $(UV)
	mkdir -p $(LLAMA_WHEELS)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(UV_HOME)/bin/pip wheel -q --no-deps --no-cache-dir \
	  --require-hashes -w $(LLAMA_WHEELS) \
	  -r <(echo "llama-cpp-python==$(LLAMA_VERSION) --hash=sha256:$(LLAMA_SHA256)")
	touch $@

# Bytecode is compiled at install (~30 s): where PYTHONDONTWRITEBYTECODE is set, as on this
# machine class, every process would otherwise compile torch, transformers and ART again (~10 s).
$(STAMP): pyproject.toml $(LOCK) Makefile $(LLAMA_WHEELS)/.built | $(UV)
	$(PYTHON) rlvr/lockfile.py check
	test -x $(BIN)/python || $(UV) venv -q --python $(PYTHON) $(VENV)
	$(UV) pip sync -q --python $(BIN)/python --require-hashes --find-links $(WHEELS) \
	  --compile-bytecode $(LOCK)
	$(UV) pip install -q --python $(BIN)/python --no-deps $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

# Re-resolve the lock after changing dependencies in pyproject.toml (needs the package index).
lock: | $(UV)
	$(UV) pip compile -q pyproject.toml $(LOCK_FLAGS) \
	  --override <(echo "torch==2.13.0+cpu") -o $(LOCK)
	$(PYTHON) rlvr/lockfile.py stamp

train: $(STAMP)
	$(BIN)/rlvr train $(TASK) $(ARGS)

preflight: $(STAMP)
	$(BIN)/rlvr preflight $(TASK) $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Everything: lint, fast tests, and the slow tier (real model, real servers, real runs), spread
# over $(WORKERS) processes of one torch thread each (torch threads fight each other on shared
# cores); the model conversion is done once before the workers start.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -c "from rlvr.policy.models import resolve_model; resolve_model('smollm2-135m')"
	RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q -ra -n $(WORKERS) --dist loadgroup --durations=25

# The fast tier for development.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/rlvr bench serve
	$(BIN)/rlvr bench turns
	$(BIN)/rlvr bench train
	$(BIN)/rlvr bench judge
	$(BIN)/rlvr bench hack

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
