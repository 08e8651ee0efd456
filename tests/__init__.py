"""The test suite, one folder per package; helpers in `tests.support`, multi-rank worker programs in `tests.workers`."""
