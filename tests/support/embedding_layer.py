"""DistributedEmbedding vs LocalEmbedding inside real multi-rank processes: same initial pieces, same
lookups, same gradients.

`check_layer_against_local()` runs on every rank of the hybrid-parallel launches (tests/support/hybrid.py:
Gloo N=2, N=3, MPI N=2) so that the horovodrun start-up is paid once; the test
`test_embedding_layer_matches_local_embedding_in_the_same_launch` asserts its results with
`assert_layer_results`. With table-wise, column-sliced, row-sliced and replicated tables in one plan
and an uneven global batch it checks: initial values of every held piece, forward vectors (eager and
inside tf.function), gradients through the process group's averaging tape of the global-mean loss (sparse
`IndexedSlices` on the shards), and a batch in which one rank has no rows at all. Each rank takes its
rows of a batch by the reader's rule (`dlrm.data.binary.rank_slice`).
"""
from __future__ import annotations

import numpy as np

from dlrm.config import ShardingConfig
from dlrm.data.binary import rank_slice
from dlrm.embedding.planner import plan_embeddings
from dlrm.features import one_hot_tables

# Tiny model with all four layouts at N = 2 and N = 3 (see `demo_plan`).
TABLE_SIZES = [60, 3, 12, 20, 4]
DIM = 5
SEED = 11
TABLES = one_hot_tables(TABLE_SIZES, DIM)


def demo_plan(world_size: int):
    """Table 0 row-sliced (over budget), 3 column-sliced, 1 and 4 replicated, 2 table-wise."""
    element = 4
    cfg = ShardingConfig(rank_memory_bytes=55 * DIM * element if world_size > 1 else None,
                         column_slice_threshold_bytes=15 * DIM * element,
                         replicate_threshold_bytes=4 * DIM * element, bytes_per_element=element)
    return plan_embeddings(TABLES, world_size, cfg)


def global_ids(batch: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, n, size=batch) for n in TABLE_SIZES]
    ids = np.stack(cols, axis=1).astype(np.int32)
    ids[:2, 0] = [TABLE_SIZES[0] - 1, 0][:batch]  # first and last row of the row-sliced table
    return ids


# ----------------------------------------------------------------------- inside each rank
def check_layer_against_local() -> dict:
    """Run on every rank of a launch; returns this rank's findings (JSON) for `assert_layer_results`."""
    import tensorflow as tf

    from dlrm import dist
    from dlrm.embedding.distributed import DistributedEmbedding
    from dlrm.embedding.local import LocalEmbedding

    group = dist.start()
    rank, world = group.rank, group.size
    plan = demo_plan(world)
    sharded = DistributedEmbedding(TABLES, plan, SEED, group=group)
    reference = LocalEmbedding(TABLES, SEED)
    result = {"rank": rank, "world": world, "kinds": [t.kind for t in plan.tables]}

    # 1. Initial values: every held piece is the same rectangle of the single-process table.
    tables = [variable.numpy() for variable in reference.table_variables]
    result["init_equal"] = all(np.array_equal(variable.numpy(), _region(tables[piece.table], piece))
                               for piece, variable in sharded.held_pieces())
    result["held"] = _rectangles(sharded.held_pieces())
    result["stored"] = _rectangles(sharded.stored_pieces())
    result["num_model_parallel"] = len(sharded.model_parallel_variables)

    def variables_of(layer):
        if isinstance(layer, LocalEmbedding):
            return list(layer.table_variables)
        return layer.model_parallel_variables + list(layer.replicated_tables.values())

    def local_loss_and_grads(layer, ids, weights, global_rows, wrap):
        with tf.GradientTape() as tape:
            vectors = layer(ids)
            # The contract's per-rank loss: sum over local rows * world / global rows.
            loss = tf.reduce_sum(vectors * weights) * (world if wrap else 1) / global_rows
        if wrap:
            tape = group.averaging_tape(tape, layer.model_parallel_variables)
        return vectors, tape.gradient(loss, variables_of(layer))

    graph_step = tf.function(lambda ids, w, g: local_loss_and_grads(sharded, ids, w, g, True))
    errors = {}
    for case, batch in (("uneven", 11), ("rank_without_rows", world - 1)):
        ids = global_ids(batch, seed=batch)
        weights = np.random.default_rng(batch + 100).normal(size=(batch, len(TABLE_SIZES) * DIM))
        weights = weights.astype(np.float32)
        mine = slice(*rank_slice(batch, rank, world))  # the reader's split of a global batch
        ref_vectors, ref_grads = local_loss_and_grads(
            reference, ids, weights, float(batch), wrap=False)
        ref_dense = [tf.convert_to_tensor(g).numpy() for g in ref_grads]
        for mode in ("eager", "graph"):
            step = graph_step if mode == "graph" else (
                lambda i, w, g: local_loss_and_grads(sharded, i, w, g, True))
            vectors, grads = step(tf.constant(ids[mine]), tf.constant(weights[mine]),
                                             tf.constant(float(batch)))
            err_fwd = float(np.max(np.abs(vectors.numpy() - ref_vectors.numpy()[mine]), initial=0.0))
            err_grad, sparse, norm = _gradient_errors(sharded, zip(grads, variables_of(sharded)), ref_dense)
            errors[f"{case}/{mode}"] = {"forward": err_fwd, "grad": err_grad, "sparse": sparse, "grad_norm": norm,
                                        "local_rows": int(mine.stop - mine.start)}
    result["errors"] = errors
    return result


def _region(table: np.ndarray, piece) -> np.ndarray:
    return table[piece.row_start:piece.row_end, piece.col_start:piece.col_end]


def _rectangles(pieces) -> list:
    """[table, row_start, row_end, col_start, col_end] of each (piece, variable), as JSON."""
    return [[p.table, p.row_start, p.row_end, p.col_start, p.col_end] for p, _ in pieces]


def _gradient_errors(sharded, grads_and_variables, ref_dense: list) -> tuple:
    """(largest difference from the one-process gradient, every shard gradient sparse, squared norm of the
    one-process gradient) over the pieces this rank holds."""
    import tensorflow as tf

    err_grad, sparse, norm = 0.0, True, 0.0
    held = {id(v): p for p, v in sharded.held_pieces()}
    model_parallel = {id(v) for v in sharded.model_parallel_variables}
    for grad, variable in grads_and_variables:
        piece = held[id(variable)]
        if id(variable) in model_parallel:
            sparse &= isinstance(grad, tf.IndexedSlices)
        want = _region(ref_dense[piece.table], piece)
        got = tf.convert_to_tensor(grad).numpy() if grad is not None else np.zeros_like(want)
        err_grad = max(err_grad, float(np.max(np.abs(got - want), initial=0.0)))
        norm += float(np.sum(want * want))
    return err_grad, sparse, norm


def assert_layer_results(results: list, world: int) -> None:
    """Assertions on every rank's `check_layer_against_local()` result."""
    assert [r["rank"] for r in results] == list(range(world))
    assert set(results[0]["kinds"]) == {"table_wise", "column_sliced", "row_sliced", "replicated"}
    for res in results:
        assert res["world"] == world
        assert res["init_equal"], f"rank {res['rank']}: initial pieces differ from LocalEmbedding"
        for case, err in res["errors"].items():
            assert err["forward"] < 1e-6, (res["rank"], case, err)
            assert err["grad"] < 1e-6, (res["rank"], case, err)
            assert err["sparse"], f"rank {res['rank']} {case}: shard gradient is not IndexedSlices"
    # The compared gradients are not trivially zero.
    assert sum(r["errors"]["uneven/eager"]["grad_norm"] for r in results) > 1e-3
    # Some rank really had no rows in the second case.
    assert min(r["errors"]["rank_without_rows/eager"]["local_rows"] for r in results) == 0
    # Each piece is stored by exactly one rank and the stored pieces tile every table once.
    stored = [tuple(p) for r in results for p in r["stored"]]
    assert len(stored) == len(set(stored))
    for t, rows in enumerate(TABLE_SIZES):
        area = sum((p[2] - p[1]) * (p[4] - p[3]) for p in stored if p[0] == t)
        assert area == rows * DIM
    # Replicated tables are held by every rank but stored by rank 0 only.
    for res in results:
        assert {p[0] for p in res["held"]} >= {1, 4}
        assert ({p[0] for p in res["stored"]} & {1, 4}) == ({1, 4} if res["rank"] == 0 else set())
