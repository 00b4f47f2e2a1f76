# One task runner; CI calls these targets exactly as a new user would.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo dev test test-fast lint typecheck imports unit bench graph screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (set PYTHON=/path/to/python3.11)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## demo: start the embedded stack, walk the main paths live, leave the Web UI up until Ctrl-C
demo: $(STAMP)
	$(BIN)/python -m aiorch.devstack demo

## dev: keep the embedded stack (Temporal + Web UI, SQS, LLM simulator, worker) up for exploring
dev: $(STAMP)
	$(BIN)/python -m aiorch.devstack up

## test: lint, type-check, check the import contracts and run every test layer (what CI runs)
test: lint typecheck imports
	$(BIN)/python -m pytest

## test-fast: the inner loop (under a minute): the import contracts, then every test that starts
## no server in a process of its own (not marked e2e); `make lint typecheck` check the rest
test-fast: imports
	$(BIN)/python -m pytest -m "not e2e"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy .

## imports: the layering contracts in pyproject.toml ([tool.importlinter])
imports: $(STAMP)
	$(BIN)/lint-imports

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

bench: $(STAMP)
	$(BIN)/python -m bench.run

## screenshots: retake the README's screenshot of the review inbox (needs Debian's chromium)
screenshots: $(STAMP)
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/e2e/test_inbox_browser.py -q

## graph: regenerate the diagrams in docs/ and the README from workflows/graph.py
graph: $(STAMP)
	$(BIN)/python -m aiorch.devstack docs

clean:
	rm -rf $(VENV) .data .mypy_cache .ruff_cache .pytest_cache
