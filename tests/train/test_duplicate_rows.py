"""The duplicate-row sum of a sparse gradient: the compiled sum gives the kernel's bits at any row count (padded
to a rounded count), ids in first-seen order."""
import numpy as np
import tensorflow as tf

from dlrm.train.duplicate_rows import ROUNDING, sum_duplicate_rows


def _gradient(rng, count: int, width: int, rows: int) -> tf.IndexedSlices:
    """Ids with many repeats; values whose sums cancel (large and small magnitudes, signed zeros)."""
    values = rng.normal(size=(count, width)) * rng.choice([1e-3, 1.0, 1e4], size=(count, 1))
    values[rng.random((count, width)) < 0.05] = -0.0
    return tf.IndexedSlices(tf.constant(values, tf.float32), tf.constant(rng.integers(0, rows, count), tf.int32))


def test_the_compiled_sum_gives_the_kernels_bits_at_any_row_count():
    rng = np.random.default_rng(3)
    compiled = tf.function(lambda g: sum_duplicate_rows(g, compiled=True, compile_from_values=1))
    kernel = tf.function(lambda g: sum_duplicate_rows(g, compiled=False))
    # row counts change from batch to batch as a multi-hot table's do; some are padded, one is not
    for count, width, rows in [(2 * ROUNDING, 8, 50), (ROUNDING + 1, 8, 3000), (2 * ROUNDING - 7, 8, 7),
                               (5, 8, 2), (2 * ROUNDING, 1, 100)]:
        grad = _gradient(rng, count, width, rows)
        (ids, summed), (kernel_ids, kernel_summed) = compiled(grad), kernel(grad)
        assert np.array_equal(ids.numpy(), kernel_ids.numpy())
        assert summed.numpy().tobytes() == kernel_summed.numpy().tobytes(), (count, width, rows)
        first_seen = list(dict.fromkeys(grad.indices.numpy().tolist()))
        assert ids.numpy().tolist() == first_seen
        expected = [grad.values.numpy()[grad.indices.numpy() == i].astype(np.float64).sum(axis=0) for i in first_seen]
        np.testing.assert_allclose(summed.numpy(), np.array(expected), rtol=1e-4, atol=1e-2)


def test_sum_duplicate_rows_eagerly():
    grad = tf.IndexedSlices(tf.constant([[1.0], [2.0], [4.0]]), tf.constant([5, 2, 5]))
    for compile_from_values in (1, 10**9):
        rows, summed = sum_duplicate_rows(grad, compile_from_values=compile_from_values)
        assert rows.numpy().tolist() == [5, 2] and summed.numpy().ravel().tolist() == [5.0, 2.0]


def _traced_op_types(**bound) -> set:
    def summed(values, indices):
        return sum_duplicate_rows(tf.IndexedSlices(values, indices), compiled=True, compile_from_values=64, **bound)

    signature = (tf.TensorSpec([None, 8], tf.float32), tf.TensorSpec([None], tf.int32))
    return {op.type for op in tf.function(summed).get_concrete_function(*signature).graph.get_operations()}


def test_the_compiled_sum_is_traced_only_where_a_step_can_reach_it():
    """8 rows of width 8 reach the 64 values of the threshold, 7 cannot: then only the kernel's sum is traced."""
    branches = {"If", "StatelessIf"}
    assert branches & _traced_op_types() and branches & _traced_op_types(max_rows=8)
    assert not branches & _traced_op_types(max_rows=7)
