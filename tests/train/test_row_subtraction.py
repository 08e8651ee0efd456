"""The optimizers' row subtraction: the XLA-compiled path gives the kernel's bits, whatever the row counts,
and compiles for a few padded lengths only; small steps keep the kernel."""
import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import OptimizerConfig
from dlrm.train.optimizers import SparseSGD, build_optimizer
from dlrm.train.row_subtraction import ROUNDING, RowSubtraction
from dlrm.train.schedule import ReferenceSchedule

# (rows, dim) of three tables; the counts per step change like a multi-hot table's or a row slice's.
TABLES = ((5000, 8), (300, 4), (70_000, 16))
STEPS = 12


def _tables(seed: int = 0):
    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.normal(size=shape).astype(np.float32)) for shape in TABLES]


def _batches():
    """Per step and table: ids with many repeats (Zipf), sometimes none, and their update rows."""
    rng = np.random.default_rng(1)
    for step in range(STEPS):
        counts = [int(rng.integers(1500, 2600)) for _ in TABLES]
        counts[1] = 0 if step == 3 else counts[1]  # a rank that received no ids of a row slice
        yield ([tf.constant(rng.zipf(1.3, n) % rows, tf.int64) for n, (rows, _) in zip(counts, TABLES)],
               [tf.constant(rng.normal(size=(n, dim)).astype(np.float32)) for n, (_, dim) in zip(counts, TABLES)])


def _traced(subtract, variables):
    signature = [[tf.TensorSpec([None], tf.int64)] * len(TABLES),
                 [tf.TensorSpec([None, dim], tf.float32) for _, dim in TABLES]]
    return tf.function(lambda rows, updates: subtract(variables, rows, updates), input_signature=signature,
                       autograph=False)


def test_compiled_subtraction_gives_the_kernel_s_bits_with_few_padded_lengths():
    kernel_tables, compiled_tables = _tables(), _tables()
    compiled = RowSubtraction(compiled=True, compile_from_rows=1)
    compiled.build(compiled_tables)
    by_kernel = _traced(RowSubtraction(compiled=False), kernel_tables)
    by_xla = _traced(compiled, compiled_tables)
    lengths = [set() for _ in TABLES]
    for rows, updates in _batches():
        by_kernel(rows, updates)
        by_xla(rows, updates)
        for t, (want, got) in enumerate(zip(kernel_tables, compiled_tables)):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
            lengths[t].add(compiled.capacity(got))
            assert compiled.capacity(got) >= int(tf.size(rows[t])) and compiled.capacity(got) % ROUNDING == 0
    # counts between 1500 and 2600 in 12 steps: the capacity grows at most twice per table
    assert all(1 <= len(seen) <= 3 for seen in lengths), lengths


def test_steps_below_the_threshold_keep_the_kernel():
    tables = _tables()
    subtract = RowSubtraction(compiled=True, compile_from_rows=10**9)
    subtract.build(tables)
    rows, updates = next(_batches())
    _traced(subtract, tables)(rows, updates)
    assert [subtract.capacity(table) for table in tables] == [0, 0, 0]


@pytest.mark.parametrize("max_rows,compiled", [(None, True), (100, True), (99, False)])
def test_a_step_bound_below_the_threshold_traces_the_kernel_alone(max_rows, compiled):
    tables = _tables()
    subtract = RowSubtraction(compiled=True, compile_from_rows=100, max_rows=max_rows)
    subtract.build(tables)
    graph = _traced(subtract, tables).get_concrete_function().graph
    assert subtract.compiled is compiled
    assert any(op.type in ("If", "StatelessIf") for op in graph.get_operations()) is compiled


@pytest.mark.parametrize("compiled", [False, True])
def test_sgd_subtracts_repeated_rows_in_turn_on_either_path(compiled):
    lr = 0.5
    table = tf.Variable(tf.zeros([6, 2]))
    optimizer = SparseSGD(ReferenceSchedule(OptimizerConfig(learning_rate=lr, warmup_steps=0, decay_steps=0)),
                          name="sgd", subtract_rows=RowSubtraction(compiled=compiled, compile_from_rows=1))
    optimizer.build([table])
    grad = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), tf.constant([4, 1, 4]),
                            tf.constant([6, 2]))
    tf.function(lambda: optimizer.apply([(grad, table)]), autograph=False)()
    want = np.zeros([6, 2], np.float32)
    want[4] -= lr * np.float32([1.0, 2.0])
    want[1] -= lr * np.float32([3.0, 4.0])
    want[4] -= lr * np.float32([5.0, 6.0])
    np.testing.assert_array_equal(table.numpy(), want)


@pytest.mark.parametrize("name", ["sgd", "adagrad", "adam", "rmsprop"])
def test_every_optimizer_gives_the_same_bits_on_either_path(name):
    """Adagrad, Adam and RMSProp subtract from unique rows (duplicates summed first), SGD from every row."""
    config = OptimizerConfig(optimizer=name, learning_rate=0.05, warmup_steps=0, decay_steps=0)
    runs = []
    for compiled in (False, True):
        tables = _tables()
        optimizer = build_optimizer(config, ReferenceSchedule(config),
                                    subtract_rows=RowSubtraction(compiled=compiled, compile_from_rows=1))
        optimizer.build(tables)
        step = tf.function(lambda rows, updates: optimizer.apply(
            [(tf.IndexedSlices(u, r, tf.constant(t.shape.as_list(), tf.int64)), t)
             for r, u, t in zip(rows, updates, tables)]),
            autograph=False, reduce_retracing=True)
        for rows, updates in list(_batches())[:4]:
            step(rows, updates)
        runs.append([t.numpy() for t in tables] + [s.numpy() for t in tables for s in optimizer.slots_for(t).values()])
    for want, got in zip(*runs):
        np.testing.assert_array_equal(got, want)
