# The two set-up commands (README): `make demo` runs the main job, `make test` runs the tests.
# Both build .venv (Debian packages, pinned Python stack, Horovod from source) the first time.
PY := .venv/bin/python

.PHONY: env demo test test-fast

env:
	bash scripts/bootstrap.sh

demo: env
	$(PY) main.py

test: env
	$(PY) -m pytest -v --durations=25 tests

test-fast: env
	$(PY) -m pytest -v -m "not slow" tests
