"""The last stage of a sparse update: each table's rows minus their update rows, one after the other in order
(SGD: every gradient row, repeats included; Adagrad, Adam, RMSProp: one summed row per id).

TensorFlow's scatter-subtract kernel does that serially (deterministic under op determinism), but on
TensorFlow 2.21 its CPU kernel is several times slower than 2.15's (`dlrm.keras2.SLOW_SCATTER_KERNEL`;
figures in docs/benchmarks.md). There a step with many rows on CPU runs one XLA-compiled function for all
tables instead: XLA's CPU scatter is the same serial loop (the same bits), updates the variables in place
(not a copy of each table), and is several times faster.

XLA compiles once per input shape, and the row count of a multi-hot table (padding ids dropped) or of a
row slice changes from batch to batch. So each table's rows are padded to a capacity that only grows, with
row ids one past the table's end, which XLA's scatter skips: after the first steps every step reuses one
compilation. A capacity starts at the first row count (rounded up to ROUNDING) and, when a batch has more
rows, grows to GROWTH times that count, so it grows rarely. Steps with fewer than COMPILE_FROM_ROWS rows in
all keep the kernel: there a compilation costs more than it saves (small models, tests). Where no step can
have that many rows (`max_rows`: the run's batch x the tables' total hotness), the compiled path is not
even traced.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import tensorflow as tf

from dlrm.keras2 import SLOW_SCATTER_KERNEL

COMPILE_FROM_ROWS = 65_536  # rows of all tables in one step
ROUNDING = 1024  # capacities are multiples of this
GROWTH = 1.125  # a capacity grows to this many times the row count that overflowed it


def _scatter_sub(variables: Sequence[tf.Variable], rows: Sequence[tf.Tensor], updates: Sequence[tf.Tensor]) -> None:
    for var, table_rows, update in zip(variables, rows, updates):
        var.scatter_sub(tf.IndexedSlices(update, table_rows))


_compiled_scatter_sub = tf.function(_scatter_sub, jit_compile=True, autograph=False)


def on_cpu(var: tf.Variable) -> bool:
    """The slow kernel is the CPU one; on a GPU, XLA's scatter would not subtract repeated rows in turn."""
    return tf.DeviceSpec.from_string(var.device).device_type in (None, "CPU")


def _round_up(count: tf.Tensor) -> tf.Tensor:
    return (count + ROUNDING - 1) // ROUNDING * ROUNDING


class RowSubtraction:
    """variables[t][rows[t][i]] -= updates[t][i] for every table t and every i in order (rows may repeat).

    `compiled`: the XLA path for steps of COMPILE_FROM_ROWS rows or more (default: where the kernel is slow);
    `max_rows`: the most rows one step can have (None: no bound), below the threshold the kernel's alone.
    Call `build` eagerly with every variable that may get rows, before tracing (it creates the capacities).
    """

    def __init__(self, compiled: bool = SLOW_SCATTER_KERNEL, compile_from_rows: int = COMPILE_FROM_ROWS,
                 max_rows: Optional[int] = None):
        self.compiled = compiled and (max_rows is None or max_rows >= compile_from_rows)
        self.compile_from_rows = compile_from_rows
        self._capacity: Dict[object, tf.Variable] = {}

    def build(self, variables: Sequence[tf.Variable]) -> None:
        if not self.compiled:
            return
        with tf.init_scope():
            for var in variables:
                if var.ref() not in self._capacity:
                    self._capacity[var.ref()] = tf.Variable(0, dtype=tf.int32, trainable=False,
                                                            name=f"{var.name.split(':')[0]}/row_capacity")

    def capacity(self, var: tf.Variable) -> int:
        """The padded row count of `var`'s compiled updates so far (0: none yet)."""
        return int(self._capacity[var.ref()].numpy())

    def __call__(self, variables: Sequence[tf.Variable], rows: Sequence[tf.Tensor],
                 updates: Sequence[tf.Tensor]) -> None:
        variables, rows, updates = list(variables), list(rows), list(updates)
        if not self.compiled or not variables or not all(on_cpu(var) for var in variables):
            _scatter_sub(variables, rows, updates)
            return
        total = tf.add_n([tf.size(table_rows, out_type=tf.int64) for table_rows in rows])

        def compiled() -> tf.Tensor:
            self._padded_and_compiled(variables, rows, updates)
            return tf.constant(True)

        def kernel() -> tf.Tensor:
            _scatter_sub(variables, rows, updates)
            return tf.constant(False)

        tf.cond(total >= self.compile_from_rows, compiled, kernel)

    def _padded_and_compiled(self, variables: List[tf.Variable], rows: List[tf.Tensor],
                             updates: List[tf.Tensor]) -> None:
        padded_rows, padded_updates = [], []
        for var, table_rows, update in zip(variables, rows, updates):
            capacity = self._capacity[var.ref()]
            count = tf.shape(table_rows, out_type=tf.int32)[0]
            grown = tf.where(capacity == 0, _round_up(count),
                             _round_up(tf.cast(tf.math.ceil(GROWTH * tf.cast(count, tf.float32)), tf.int32)))
            length = tf.where(count > capacity, grown, capacity)
            capacity.assign(length)
            past_the_end = tf.cast(var.shape[0], table_rows.dtype)  # skipped by XLA's scatter
            padded_rows.append(tf.pad(table_rows, [[0, length - count]], constant_values=past_the_end))
            padded_updates.append(tf.pad(update, [[0, length - count], [0, 0]]))
        _compiled_scatter_sub(variables, padded_rows, padded_updates)
