# rlvr — every target bootstraps its own environment (.venv) on a fresh machine.
#   make train TASK=email [ARGS="key=value ..."]    make test    make bench
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TASK ?= email
ARGS ?=
# torch: the CPU build (a file on this kind of machine); GPU machines may set TORCH=torch.
TORCH ?= torch==2.13.0
# llama.cpp portable build: the native build crashes in AMX kernels here and OpenMP slows the
# server thread (design.md §3). The wheel is cached per flag set so a rebuild happens once a machine.
LLAMA_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF
LLAMA_WHEELS := $(HOME)/.cache/rlvr/wheels/llama-cpp-$(LLAMA_VERSION)-portable

.PHONY: setup train test test-fast lint bench preflight inspect clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=python3.x (3.11+)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	mkdir -p $(LLAMA_WHEELS)
	ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel -q --no-deps --no-cache-dir \
	    -w $(LLAMA_WHEELS) "llama-cpp-python==$(LLAMA_VERSION)"
	$(BIN)/pip install -q $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/rlvr train $(TASK) $(ARGS)

preflight: $(STAMP)
	$(BIN)/rlvr preflight $(TASK) $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Everything: lint, fast tests, and the slow tier (real model, real servers, real runs).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -ra

# The fast tier for development.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/rlvr bench serve
	$(BIN)/rlvr bench train
	$(BIN)/rlvr bench judge
	$(BIN)/rlvr bench hack

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
