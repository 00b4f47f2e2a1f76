# One task runner; CI calls these targets exactly as a new user would.
# Python 3.11, 3.12 or 3.13: `make test PYTHON=python3.12 VENV=.venv-3.12` (each venv its own).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Hash-locked package sets (`make lock` writes them): the image installs runtime.txt only;
# development and CI install dev.txt (runtime + the local servers + test tools + build backend).
LOCK_RUNTIME := requirements/runtime.txt
LOCK_DEV := requirements/dev.txt
LOCK_BUILD := requirements/build.txt
# What installs into $(VENV): the venv's own pip, whatever version its Python bundled. Every
# install is `--no-deps` from a complete hash-locked set, so no installer resolves anything and
# the same lock installs the same bytes with any pip (tests/static checks this). CI's extra
# venvs pass uv's (`PIP_INSTALL="uv pip install --python .venv-3.12/bin/python"`).
PIP_INSTALL ?= $(BIN)/python -m pip install

# `make test` and `make test-fast` hand whole test files to parallel pytest processes: most
# live-server tests wait on timers and servers, not on the CPU, so four fit on two cores. A file
# runs in one process, so its module-scoped servers serve only its own tests.
# `TEST_PROCESSES=0` runs every test in this process, one after another.
TEST_PROCESSES ?= 4
FAST_PROCESSES ?= 2
PARALLEL = --dist loadfile --no-loadscope-reorder

.PHONY: demo dev test test-fast lint typecheck imports unit mutate bench graph screenshots lock clean

$(STAMP): pyproject.toml $(LOCK_DEV)
	$(PYTHON) -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 13) else "Python 3.11, 3.12 or 3.13 is required (set PYTHON=/path/to/python3.x)")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --quiet --no-deps --require-hashes -r $(LOCK_DEV)
	# Metadata an older in-tree build left here would shadow the installed project's.
	rm -rf ai_orchestrator.egg-info
	$(PIP_INSTALL) --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

## demo: start the embedded stack, walk the main paths live, leave the Web UI up until Ctrl-C
demo: $(STAMP)
	$(BIN)/python -m aiorch.devstack demo

## dev: keep the embedded stack (Temporal + Web UI, SQS, LLM simulator, worker) up for exploring
dev: $(STAMP)
	$(BIN)/python -m aiorch.devstack up

## test: lint, type-check, check the import contracts and run every test layer (what CI runs)
test: lint typecheck imports
	$(BIN)/python -m pytest -n $(TEST_PROCESSES) $(PARALLEL) --durations=15

## test-fast: the inner loop (under a minute): the import contracts, then every test not marked
## e2e (no server in a process of its own but the in-memory capacity store); `make lint typecheck`
## check the rest.
## CI runs it on whichever of Python 3.12 and 3.13 does not run `make test` that commit
test-fast: imports
	$(BIN)/python -m pytest -n $(FAST_PROCESSES) $(PARALLEL) -m "not e2e"

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

## mutate: mutation testing (mutmut) of the modules that enforce security and the contract,
## against the fast tests that exercise them; prints each module's kill rate and every
## survivor (docs/mutation.md). On demand only: CI does not run it
mutate: $(STAMP)
	$(BIN)/python -m tests.mutation.run

bench: $(STAMP)
	$(BIN)/python -m bench.run

## screenshots: retake the README's screenshot of the review inbox (needs Debian's chromium)
screenshots: $(STAMP)
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/e2e/test_inbox_browser.py -q

## graph: regenerate the generated docs: diagrams (docs/, README), JSON schemas, and the
## configuration reference (docs/configuration.md, .env.example) from the settings
graph: $(STAMP)
	$(BIN)/python -m aiorch.devstack docs

## lock: re-resolve the locks within pyproject's ranges, for Python 3.11-3.13 on every platform
UV_COMPILE := $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes
lock: $(STAMP)
	$(UV_COMPILE) pyproject.toml -o $(LOCK_RUNTIME)
	$(UV_COMPILE) pyproject.toml requirements/build.in --extra dev -c $(LOCK_RUNTIME) -o $(LOCK_DEV)
	$(UV_COMPILE) requirements/build.in -c $(LOCK_DEV) -o $(LOCK_BUILD)

clean:
	rm -rf $(VENV) .venv-3.* .data .mypy_cache .ruff_cache .pytest_cache mutants
