"""The test suite, one folder per package; helpers in `tests.support`, multi-rank worker programs in `tests.workers`.

It imports `dlrm` first, so that TensorFlow, whichever module imports it first, loads with the package's
environment switches (dlrm/__init__.py).
"""
import dlrm  # noqa: F401
