# trainfabric — every target creates .venv on first use and installs into it (idempotent).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
export MPLBACKEND := Agg

.PHONY: demo test test-all bench lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,distributed]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/trainfabric demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m ''

bench: $(STAMP)
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b --quick || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
