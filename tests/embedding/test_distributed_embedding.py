"""DistributedEmbedding on one rank: the same lookups as LocalEmbedding, and bad plans or ids refused.

The multi-rank comparison (initial pieces, lookups and gradients on 2 and 3 ranks) runs inside the
hybrid-parallel launches: tests/support/embedding_layer.py, asserted by
tests/integration/test_hybrid_parallel.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from dlrm.features import one_hot_tables
from tests.support.embedding_layer import DIM, SEED, TABLE_SIZES, TABLES, demo_plan, global_ids


def test_one_rank_plan_matches_local_embedding_and_rejects_bad_input():
    import tensorflow as tf

    from dlrm import dist
    from dlrm.embedding.distributed import DistributedEmbedding
    from dlrm.embedding.local import LocalEmbedding

    group = dist.start()
    assert group.size == 1
    plan = demo_plan(1)
    sharded = DistributedEmbedding(TABLES, plan, SEED, group=group)
    reference = LocalEmbedding(TABLES, SEED)
    ids = global_ids(6, seed=3)
    np.testing.assert_array_equal(sharded(ids).numpy(), reference(ids).numpy())
    assert len(sharded.model_parallel_variables) == len(TABLE_SIZES)
    with pytest.raises(ValueError, match="plan is for 2 ranks but this job has 1"):
        DistributedEmbedding(TABLES, demo_plan(2), SEED, group=group)
    with pytest.raises(ValueError, match="does not match the tables"):
        DistributedEmbedding(one_hot_tables([61] + TABLE_SIZES[1:], DIM), plan, SEED, group=group)
    bad = ids.copy()
    bad[2, 3] = TABLE_SIZES[3]
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        sharded(bad)
