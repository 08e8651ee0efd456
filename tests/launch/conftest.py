"""Fixtures of the launch tests."""
import pytest

from tests.support import slurm_cluster as slurm


@pytest.fixture(scope="module")
def slurm_cluster():
    """A fresh private two-node cluster for one test module; always torn down."""
    missing = slurm.missing_binaries()
    if missing:
        pytest.fail(f"Slurm test cluster needs {missing} (Debian slurm-wlm + munge, see scripts/bootstrap.sh)")
    cluster = slurm.start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
