"""DistributedEmbedding on one rank: the same pooled lookups as LocalEmbedding, bad plans or ids refused,
and the static exchange layout it derives from a plan.

The multi-rank comparison (initial pieces, lookups, gradients and optimizer steps on 2 and 3 ranks) runs
inside the hybrid-parallel launches: tests/support/embedding_layer.py, asserted by
tests/integration/test_hybrid_parallel.py.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.support.embedding_layer import KINDS, SEED, TABLES, demo_plan, global_ids, id_block


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
    np.testing.assert_allclose(sharded(ids).numpy(), reference(ids).numpy(), rtol=0, atol=1e-7)
    assert len(sharded.model_parallel_variables) == len(TABLES) - KINDS.count("replicated")
    with pytest.raises(ValueError, match="plan is for 2 ranks but this job has 1"):
        DistributedEmbedding(TABLES, demo_plan(2), SEED, group=group)
    with pytest.raises(ValueError, match=r"does not match the tables: table 0 \('rows_mean_bag', 61 rows x 4\)"):
        DistributedEmbedding((replace(TABLES[0], rows=61),) + TABLES[1:], plan, SEED, group=group)
    with pytest.raises(ValueError, match=r"does not match the tables: table 1 \('cols_sum_bag', 20 rows x 5\)"):
        DistributedEmbedding(TABLES[:1] + (replace(TABLES[1], dim=5),) + TABLES[2:], plan, SEED, group=group)
    starts = np.cumsum([0] + [t.hotness for t in TABLES])
    for column, value in ((starts[4], TABLES[4].rows), (starts[2], -1), (starts[0] + 2, -2)):
        bad = ids.copy()
        bad[2, column] = value  # past the end; padding in a one-hot column; below the padding id
        with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
            sharded(bad)


def test_exchange_sends_each_owner_its_tables_id_columns_and_gets_one_vector_per_piece_back():
    from dlrm.embedding.exchange import Exchange

    plan = demo_plan(3)
    sharded = {t: list(p.pieces) for t, p in enumerate(plan.tables) if p.kind != "replicated"}
    exchange = Exchange(TABLES, sharded, 3)
    for rank in range(3):
        routes = exchange.routes[rank]
        assert exchange.id_width(rank) == sum(TABLES[r.table].hotness for r in routes)
        assert exchange.vector_width(rank) == sum(r.piece.col_end - r.piece.col_start for r in routes)
        assert all(r.row_slice == (KINDS[r.table] == "row_sliced") for r in routes)
    # Row slices: one column group whose pieces' partial sums add up; column slices: groups in column order.
    rows = exchange.assembly[0].column_groups
    assert len(rows) == 1 and len(rows[0]) == 3
    columns = [exchange.returned_order[group[0]].piece for group in exchange.assembly[1].column_groups]
    assert [(p.col_start, p.col_end) for p in columns] == [(0, 2), (2, 4), (4, 6)]
    assert set(exchange.assembly) == {t for t, kind in enumerate(KINDS) if kind != "replicated"}


def test_ids_outside_a_row_slice_travel_as_padding_and_the_rest_shifted():
    from dlrm.embedding.distributed import DistributedEmbedding
    from dlrm.embedding.exchange import Route
    from dlrm.embedding.pieces import TablePiece

    bag = np.array([[0, 33, 34], [59, -1, -1]], np.int32)
    route = Route(TablePiece(0, 34, 60, 0, 4), hotness=3, row_slice=True)
    sent = DistributedEmbedding._ids_for([bag], [route]).numpy().reshape(2, 3)
    np.testing.assert_array_equal(sent, [[-1, -1, 0], [25, -1, -1]])
    assert id_block(global_ids(4, 1), 1).shape == (4, TABLES[1].hotness)
