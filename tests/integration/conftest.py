"""Fixtures of the end-to-end tests."""
import pytest

from tests.support import hybrid


@pytest.fixture(scope="session")
def three_rank_checkpoint() -> str:
    """The final checkpoint (step 4) of the 3-rank Adagrad launch that tests/integration/test_hybrid_parallel.py
    compares with one process (one launch per session, shared)."""
    return hybrid.three_rank_checkpoint()
