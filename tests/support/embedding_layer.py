"""DistributedEmbedding vs LocalEmbedding inside real multi-rank processes: same initial pieces, same
pooled lookups, same gradients, same weights after optimizer steps.

`check_layer_against_local()` runs on every rank of the hybrid-parallel launches (tests/support/hybrid.py:
Gloo N=2, N=3, MPI N=2) so that the horovodrun start-up is paid once; the test
`test_embedding_layer_matches_local_embedding_in_the_same_launch` asserts its results with
`assert_layer_results`. The tables mix one-hot and multi-hot bags, sum and mean, different dims, and
table-wise, column-sliced, row-sliced (mean over a row-sliced bag included) and replicated layouts
(`demo_plan`, built by hand). With an uneven global batch of 11 rows, bags of every length (empty ones
included), it checks: initial values of every held piece, forward vectors (eager and inside
tf.function), gradients through the process group's averaging tape of the global-mean loss (sparse
`IndexedSlices` on the shards, one row per real id: none for padding), a batch in which one rank has no
rows at all, and the weights after SGD and Adagrad steps. Each rank takes its rows of a batch by the
reader's rule (`dlrm.data.reader.reader.rank_slice`).
"""
from __future__ import annotations

import numpy as np

from dlrm.data.reader.reader import rank_slice
from dlrm.features import PADDING_ID, TableConfig
from tests.support.hybrid import hand_plan

# Every layout with one-hot and multi-hot bags, sum and mean, and per-table dims.
TABLES = (
    TableConfig("rows_mean_bag", 60, 4, hotness=3, combiner="mean", multi_hot=True),
    TableConfig("cols_sum_bag", 20, 6, hotness=2, combiner="sum", multi_hot=True),
    TableConfig("whole_one_hot", 12, 5),
    TableConfig("replicated_bag", 4, 3, hotness=2, combiner="sum", multi_hot=True),
    TableConfig("rows_one_hot", 30, 4),
    TableConfig("whole_mean_bag", 15, 2, hotness=4, combiner="mean", multi_hot=True),
    TableConfig("replicated_one_hot", 3, 5),
    TableConfig("cols_mean_bag", 10, 3, hotness=1, combiner="mean", multi_hot=True),
)
KINDS = ["row_sliced", "column_sliced", "table_wise", "replicated", "row_sliced", "table_wise", "replicated",
         "column_sliced"]
SEED = 11
OPTIMIZER_STEPS = {"sgd": 0.5, "adagrad": 0.1}  # optimizer -> learning rate of the step checks
STEP_BATCHES = (11, 5, 2)  # global batches of the optimizer steps (uneven; at N = 3 one rank gets none)


def demo_plan(world_size: int):
    """Every kind of `KINDS` on `world_size` ranks (at one rank: every table whole on rank 0)."""
    return hand_plan(TABLES, world_size, KINDS if world_size > 1 else
                     ["replicated" if k == "replicated" else "table_wise" for k in KINDS])


def global_ids(batch: int, seed: int) -> np.ndarray:
    """[batch, total_hotness] int32: bags of random length (row 1: all empty), padding at their ends."""
    rng = np.random.default_rng(seed)
    blocks = []
    for table in TABLES:
        ids = rng.integers(0, table.rows, size=(batch, table.hotness))
        ids[:2, 0] = [table.rows - 1, 0][:batch]  # first and last row of each table (row-slice edges)
        if table.multi_hot:
            lengths = rng.integers(0, table.hotness + 1, size=batch)
            lengths[:1] = table.hotness  # a full bag
            lengths[1:2] = 0  # an empty bag
            ids[np.arange(table.hotness)[None, :] >= lengths[:, None]] = PADDING_ID
        blocks.append(ids)
    return np.concatenate(blocks, axis=1).astype(np.int32)


def id_block(ids: np.ndarray, table: int) -> np.ndarray:
    start = sum(t.hotness for t in TABLES[:table])
    return ids[:, start:start + TABLES[table].hotness]


# ----------------------------------------------------------------------- inside each rank
def check_layer_against_local() -> dict:
    """Run on every rank of a launch; returns this rank's findings (JSON) for `assert_layer_results`."""
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
    result["init_equal"] = all(np.array_equal(variable.numpy(), _region(reference.table_variables[piece.table], piece))
                               for piece, variable in sharded.held_pieces())
    result["held"] = _rectangles(sharded.held_pieces())
    result["stored"] = _rectangles(sharded.stored_pieces())
    result["num_model_parallel"] = len(sharded.model_parallel_variables)
    result["errors"] = _lookup_and_gradient_errors(group, sharded, reference)
    result["steps"] = {name: _step_errors(group, name) for name in OPTIMIZER_STEPS}
    return result


def _variables_of(layer) -> list:
    if hasattr(layer, "table_variables"):
        return list(layer.table_variables)
    return layer.model_parallel_variables + list(layer.replicated_tables.values())


def _loss_and_grads(group, layer, ids, weights, global_rows, wrap: bool):
    """The contract's per-rank loss (sum over local rows x world / global rows) and its gradients."""
    import tensorflow as tf

    world = group.size if wrap else 1
    with tf.GradientTape() as tape:
        vectors = layer(ids)
        loss = tf.reduce_sum(vectors * weights) * world / global_rows
    if wrap:
        tape = group.averaging_tape(tape, layer.model_parallel_variables)
    return vectors, tape.gradient(loss, _variables_of(layer))


def _lookup_and_gradient_errors(group, sharded, reference) -> dict:
    import tensorflow as tf

    rank, world = group.rank, group.size
    graph_step = tf.function(lambda ids, w, g: _loss_and_grads(group, sharded, ids, w, g, True))
    errors = {}
    for case, batch in (("uneven", 11), ("rank_without_rows", world - 1)):
        ids = global_ids(batch, seed=batch)
        weights = np.random.default_rng(batch + 100).normal(size=(batch, sharded.total_dim)).astype(np.float32)
        mine = slice(*rank_slice(batch, rank, world))  # the reader's split of a global batch
        ref_vectors, ref_grads = _loss_and_grads(group, reference, ids, weights, float(batch), wrap=False)
        ref_dense = [tf.convert_to_tensor(g).numpy() for g in ref_grads]
        for mode in ("eager", "graph"):
            step = graph_step if mode == "graph" else (
                lambda i, w, g: _loss_and_grads(group, sharded, i, w, g, True))
            vectors, grads = step(tf.constant(ids[mine]), tf.constant(weights[mine]), tf.constant(float(batch)))
            err_fwd = float(np.max(np.abs(vectors.numpy() - ref_vectors.numpy()[mine]), initial=0.0))
            found = _gradient_errors(sharded, zip(grads, _variables_of(sharded)), ref_dense, ids)
            errors[f"{case}/{mode}"] = {"forward": err_fwd, **found, "local_rows": int(mine.stop - mine.start),
                                        "shape": list(vectors.shape)}
    return errors


def _step_errors(group, optimizer_name: str) -> dict:
    """Largest difference between the sharded and the one-process tables after a few optimizer steps, and
    how far the steps moved the one-process tables (the comparison is not between initial values)."""
    import tensorflow as tf

    from dlrm.config import OptimizerConfig
    from dlrm.embedding.distributed import DistributedEmbedding
    from dlrm.embedding.local import LocalEmbedding, initial_table_values
    from dlrm.train.optimizers import build_optimizer
    from dlrm.train.schedule import ReferenceSchedule

    cfg = OptimizerConfig(optimizer_name, OPTIMIZER_STEPS[optimizer_name], warmup_steps=0, decay_steps=0)
    layers = {"sharded": DistributedEmbedding(TABLES, demo_plan(group.size), SEED, group=group),
              "local": LocalEmbedding(TABLES, SEED)}
    for name, layer in layers.items():
        optimizer = build_optimizer(cfg, ReferenceSchedule(cfg))
        optimizer.build(_variables_of(layer))
        wrap = name == "sharded"

        @tf.function(input_signature=[tf.TensorSpec([None, layer.total_hotness], tf.int32),
                                      tf.TensorSpec([None, layer.total_dim], tf.float32),
                                      tf.TensorSpec([], tf.float32)])
        def step(ids, weights, global_rows, layer=layer, optimizer=optimizer, wrap=wrap):
            _, grads = _loss_and_grads(group, layer, ids, weights, global_rows, wrap)
            optimizer.apply(zip(grads, _variables_of(layer)))

        for batch in STEP_BATCHES:
            ids = global_ids(batch, seed=batch + 7)
            weights = np.random.default_rng(batch).normal(size=(batch, layer.total_dim)).astype(np.float32)
            mine = slice(*rank_slice(batch, group.rank, group.size)) if wrap else slice(0, batch)
            step(tf.constant(ids[mine]), tf.constant(weights[mine]), tf.constant(float(batch)))
    local = layers["local"].table_variables
    moved = max(float(np.max(np.abs(table.numpy() - initial_table_values(t, table.shape[0], table.shape[1], SEED))))
                for t, table in enumerate(local))
    error = max(float(np.max(np.abs(variable.numpy() - _region(local[piece.table], piece))))
                for piece, variable in layers["sharded"].held_pieces())
    return {"error": error, "moved": moved}


def _region(table, piece) -> np.ndarray:
    table = table.numpy() if hasattr(table, "numpy") else table
    return table[piece.row_start:piece.row_end, piece.col_start:piece.col_end]


def _rectangles(pieces) -> list:
    """[table, row_start, row_end, col_start, col_end] of each (piece, variable), as JSON."""
    return [[p.table, p.row_start, p.row_end, p.col_start, p.col_end] for p, _ in pieces]


def _gradient_errors(sharded, grads_and_variables, ref_dense: list, global_batch_ids: np.ndarray) -> dict:
    """Largest difference from the one-process gradient, whether every shard gradient is sparse with one row
    per real id of the global batch inside the shard's rows (none for padding), and the squared norm of the
    one-process gradient, over the pieces this rank holds."""
    import tensorflow as tf

    err_grad, sparse, rows_match, norm = 0.0, True, True, 0.0
    held = {id(v): p for p, v in sharded.held_pieces()}
    model_parallel = {id(v) for v in sharded.model_parallel_variables}
    for grad, variable in grads_and_variables:
        piece = held[id(variable)]
        if id(variable) in model_parallel:
            sparse &= isinstance(grad, tf.IndexedSlices)
            ids = id_block(global_batch_ids, piece.table)
            real_in_piece = int(np.sum((ids >= piece.row_start) & (ids < piece.row_end)))
            rows_match &= grad is not None and int(grad.indices.shape[0]) == real_in_piece
        want = _region(ref_dense[piece.table], piece)
        got = tf.convert_to_tensor(grad).numpy() if grad is not None else np.zeros_like(want)
        err_grad = max(err_grad, float(np.max(np.abs(got - want), initial=0.0)))
        norm += float(np.sum(want * want))
    return {"grad": err_grad, "sparse": sparse, "rows_per_real_id": rows_match, "grad_norm": norm}


def assert_layer_results(results: list, world: int) -> None:
    """Assertions on every rank's `check_layer_against_local()` result."""
    assert [r["rank"] for r in results] == list(range(world))
    assert set(results[0]["kinds"]) == {"table_wise", "column_sliced", "row_sliced", "replicated"}
    total_dim = sum(t.dim for t in TABLES)
    for res in results:
        assert res["world"] == world
        assert res["init_equal"], f"rank {res['rank']}: initial pieces differ from LocalEmbedding"
        for case, err in res["errors"].items():
            assert err["shape"] == [err["local_rows"], total_dim], (res["rank"], case, err)
            assert err["forward"] < 1e-6, (res["rank"], case, err)
            assert err["grad"] < 1e-6, (res["rank"], case, err)
            assert err["sparse"], f"rank {res['rank']} {case}: shard gradient is not IndexedSlices"
            assert err["rows_per_real_id"], f"rank {res['rank']} {case}: shard gradient rows != real ids"
        for optimizer, err in res["steps"].items():
            assert err["error"] < 1e-5, f"rank {res['rank']}: tables differ after {optimizer} steps: {err}"
            assert err["moved"] > 1e-3, f"rank {res['rank']}: {optimizer} steps did not move the tables: {err}"
    # The compared gradients are not trivially zero.
    assert sum(r["errors"]["uneven/eager"]["grad_norm"] for r in results) > 1e-3
    # Some rank really had no rows in the second case.
    assert min(r["errors"]["rank_without_rows/eager"]["local_rows"] for r in results) == 0
    # Each piece is stored by exactly one rank and the stored pieces tile every table once.
    stored = [tuple(p) for r in results for p in r["stored"]]
    assert len(stored) == len(set(stored))
    for t, table in enumerate(TABLES):
        area = sum((p[2] - p[1]) * (p[4] - p[3]) for p in stored if p[0] == t)
        assert area == table.rows * table.dim
    # Replicated tables are held by every rank but stored by rank 0 only.
    replicated = {t for t, kind in enumerate(KINDS) if kind == "replicated"}
    for res in results:
        assert {p[0] for p in res["held"]} >= replicated
        assert ({p[0] for p in res["stored"]} & replicated) == (replicated if res["rank"] == 0 else set())
