"""A sparse gradient's rows summed per id: (unique ids in first-seen order, one summed row each).

Adagrad, Adam, RMSProp and FTRL update a row seen k times in a batch once, with the sum of its k gradient
rows. TensorFlow's CPU kernel for that sum (`UnsortedSegmentSum`) runs far below memory speed; XLA's
compiled sum is the same serial loop over the rows in order (the same bits) and faster (docs/benchmarks.md).
So on CPU a gradient of COMPILE_FROM_VALUES values or more is summed by one compiled function.

XLA compiles once per input shape, and both the number of ids (a multi-hot bag drops its padding) and the
number of distinct ids change from batch to batch. So the rows are padded to a multiple of ROUNDING, with
ids one past the end, which XLA's scatter skips; the sum is written into as many rows as the padded input
has (a bound on the distinct ids) and the first ones are kept: one compilation per rounded row count. Where
no step's gradient can reach COMPILE_FROM_VALUES (`max_rows`), the compiled sum is not even traced.
"""
from __future__ import annotations

from typing import Optional, Tuple

import tensorflow as tf

COMPILE_FROM_VALUES = 1 << 17  # gradient values (rows x width) from which the compiled sum pays off
ROUNDING = 1024  # compiled row counts are multiples of this


def _sum_into_rows(values: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """values [n, w] summed by position into [n, w] (positions >= n are skipped)."""
    return tf.math.unsorted_segment_sum(values, positions, tf.shape(values)[0])


_compiled_sum_into_rows = tf.function(_sum_into_rows, jit_compile=True, autograph=False)


def sum_duplicate_rows(grad: tf.IndexedSlices, compiled: bool = True, compile_from_values: int = COMPILE_FROM_VALUES,
                       max_rows: Optional[int] = None) -> Tuple[tf.Tensor, tf.Tensor]:
    """(unique row ids, summed gradient rows) of an IndexedSlices gradient, in first-seen order.

    `compiled`: whether large gradients may take the compiled sum (False for a table on a GPU, whose XLA
    scatter adds repeated rows atomically, in no fixed order); `max_rows`: the most gradient rows a step can
    have (None: no bound)."""
    rows, positions = tf.unique(grad.indices)
    unique = tf.shape(rows)[0]
    values = grad.values
    width = values.shape[1] if values.shape.rank == 2 else None
    reachable = width is not None and (max_rows is None or max_rows * width >= compile_from_values)
    if not compiled or not reachable:
        return rows, tf.math.unsorted_segment_sum(values, positions, unique)
    count = tf.shape(positions)[0]

    def compiled_sum() -> tf.Tensor:
        padded = (count + ROUNDING - 1) // ROUNDING * ROUNDING
        padded_values = tf.pad(values, [[0, padded - count], [0, 0]])
        padded_positions = tf.pad(positions, [[0, padded - count]], constant_values=padded)
        return _compiled_sum_into_rows(padded_values, padded_positions)[:unique]

    def kernel_sum() -> tf.Tensor:
        return tf.math.unsorted_segment_sum(values, positions, unique)

    return rows, tf.cond(count * width >= compile_from_values, compiled_sum, kernel_sum)
