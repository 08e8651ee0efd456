# The two set-up commands (README): `make demo` runs the main job, `make test` runs the tests.
# Both build the stack's virtual environment the first time (scripts/bootstrap.sh: Debian packages, the
# pinned Python stack). The stack: `make STACK=horovod ...` or $DLRM_STACK, else `current` (TensorFlow 2.21,
# .venv); `horovod` is TensorFlow 2.15 + Horovod (.venv-horovod). The venv: `make VENV=...`, else $DLRM_VENV.
STACK ?= $(or $(DLRM_STACK),current)
VENV ?= $(or $(DLRM_VENV),$(if $(filter horovod,$(STACK)),.venv-horovod,.venv))
PY := $(VENV)/bin/python
# pytest-xdist workers (tests/conftest.py: the multi-process tests run one at a time on one of them).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
# The other stack's interpreter, for the tests that restore one stack's checkpoints on the other.
OTHER_VENV ?= $(if $(filter horovod,$(STACK)),.venv,.venv-horovod)

.PHONY: env demo lint test test-fast test-horovod-lane

env:
	DLRM_STACK="$(STACK)" DLRM_VENV="$(abspath $(VENV))" bash scripts/bootstrap.sh

demo: env
	$(PY) main.py

lint: env
	$(PY) -m ruff check .
	$(PY) -m mypy

test: lint
	$(PYTEST) -v --durations=25 tests

test-fast: env
	$(PYTEST) -v -m "not slow" tests

# CI's second lane (`make STACK=horovod test-horovod-lane`, docs/testing.md): on the Horovod stack, the
# tests marked both_stacks (tests/conftest.py); every test runs on the current stack (`make test`).
test-horovod-lane: lint
	DLRM_OTHER_STACK_PYTHON="$(abspath $(OTHER_VENV))/bin/python" \
	  $(PYTEST) -v --durations=25 -m both_stacks tests
