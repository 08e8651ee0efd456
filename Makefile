# The two set-up commands (README): `make demo` runs the main job, `make test` runs the tests.
# Both build .venv (Debian packages, pinned Python stack, Horovod from source) the first time.
# The venv: `make VENV=...`, else $DLRM_VENV (as scripts/bootstrap.sh), else .venv; bootstrap builds that one.
VENV ?= $(or $(DLRM_VENV),.venv)
PY := $(VENV)/bin/python

.PHONY: env demo lint test test-fast

env:
	DLRM_VENV="$(abspath $(VENV))" bash scripts/bootstrap.sh

demo: env
	$(PY) main.py

lint: env
	$(PY) -m ruff check .
	$(PY) -m mypy

test: lint
	$(PY) -m pytest -v --durations=25 tests

test-fast: env
	$(PY) -m pytest -v -m "not slow" tests
