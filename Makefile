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
# The lock covers the default CPU install and the dev/test extras, for CPython 3.11 on x86-64 Linux.
LOCK_FLAGS := --extra dev --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --find-links $(WHEELS) \
  --no-emit-package llama-cpp-python
# llama.cpp: the sdist (hash-pinned here: pip builds it, so it stays out of the lock) is compiled
# portable — the native build crashes in AMX kernels here and OpenMP slows the server thread
# (design.md §3) — without the multimodal library (LLAVA_BUILD=OFF: a third of the objects; the
# judge reads text only). Its build requirements come hash-pinned from requirements-build.lock
# (no build isolation, so pip fetches nothing unpinned); cmake and ninja are the system's. The
# wheel is cached per flag set, so it is built once a machine.
LLAMA_VERSION := 0.3.36
LLAMA_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAVA_BUILD=OFF
# The cached wheel is keyed by the content of the build lock and the flags, not by file times: a
# fresh clone (new mtimes) reuses it, a changed lock or flag set builds anew.
LLAMA_KEY := $(shell cat requirements-build.lock | sha256sum | cut -c1-12)-$(shell echo '$(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-8)
LLAMA_WHEELS := $(HOME)/.cache/rlvr/wheels/llama-cpp-$(LLAMA_VERSION)-portable-text-$(LLAMA_KEY)
# Test workers: pytest-xdist processes (auto = one per core).
WORKERS ?= auto

.PHONY: setup judge-engine lock train test test-fast lint bench preflight clean

setup: $(STAMP)

$(UV):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=python3.x (3.11+)"; exit 2; }
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q --require-hashes --only-binary=:all: \
	  -r <(echo "uv==$(UV_VERSION) $(UV_HASHES)")

$(LLAMA_WHEELS)/.built: | $(UV)
	@command -v cmake >/dev/null && command -v ninja >/dev/null || { echo "error: building llama.cpp needs cmake and ninja (apt-get install cmake ninja-build)"; exit 2; }
	mkdir -p $(LLAMA_WHEELS)
	$(UV_HOME)/bin/pip install -q --require-hashes --only-binary=:all: -r requirements-build.lock
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(UV_HOME)/bin/pip wheel -q --no-deps --no-cache-dir \
	  --no-build-isolation --require-hashes -w $(LLAMA_WHEELS) \
	  -r <(echo "llama-cpp-python==$(LLAMA_VERSION) --hash=sha256:$(LLAMA_SHA256)")
	touch $@

# Bytecode is compiled at install (~30 s): where PYTHONDONTWRITEBYTECODE is set, as on this
# machine class, every process would otherwise compile torch, transformers and ART again (~10 s).
$(STAMP): pyproject.toml $(LOCK) Makefile | $(UV)
	$(PYTHON) rlvr/lockfile.py check
	test -x $(BIN)/python || $(UV) venv -q --python $(PYTHON) $(VENV)
	$(UV) pip sync -q --python $(BIN)/python --require-hashes --find-links $(WHEELS) \
	  --compile-bytecode $(LOCK)
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

# The local judge engine (llama.cpp), only where a judge runs: `make test` and `make bench` build it
# up front; `make train` does not (the default email run never calls a judge), and a run whose
# scorer needs judge=local builds it on first use (judges/engine.py runs this target). After the
# lock sync (which removes what the lock does not list) it is installed again.
JUDGE_STAMP := $(VENV)/.judge-engine
judge-engine: $(JUDGE_STAMP)

$(JUDGE_STAMP): $(STAMP) $(LLAMA_WHEELS)/.built
	$(UV) pip install -q --python $(BIN)/python --no-deps $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	touch $@

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
test: $(STAMP) $(JUDGE_STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -c "from rlvr.policy.models import resolve_model; resolve_model('smollm2-135m')"
	RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q -ra -n $(WORKERS) --dist loadgroup --durations=25

# The fast tier for development.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP) $(JUDGE_STAMP)
	$(BIN)/rlvr bench serve
	$(BIN)/rlvr bench turns
	$(BIN)/rlvr bench train
	$(BIN)/rlvr bench eval math
	$(BIN)/rlvr bench judge
	$(BIN)/rlvr bench hack

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
