"""Single-process embedding tables: one float32 variable per table, sparse gradients.

Initial values come from `initial_table_values`, a counter-based hash of (seed, table, row, column)
turned into the table's initializer (uniform, truncated Glorot normal, or zeros).
Any rectangle of any table can therefore be generated on its own, without materialising the table,
and equals the same region of the full table bit for bit. The sharded twin
(`dlrm.embedding.distributed`) initialises its row/column slices with it, which is what makes a
sharded model start from exactly the single-process weights.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from dlrm.embedding.base import EmbeddingCollection, TablePiece
from dlrm.embedding.pooling import pool
from dlrm.features import TableConfig

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
# Elements hashed per chunk: bounds the temporary uint64 memory (~8 bytes x 4 arrays per element).
_CHUNK_ELEMENTS = 1 << 22


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrapping arithmetic): a strong 64-bit mixer."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _table_key(seed: int, table_index: int) -> np.uint64:
    """A 64-bit stream key per (seed, table), so tables never share values."""
    mixed = (int(seed) & _MASK64) * 0xD1B54A32D192ED03 + (int(table_index) + 1) * _GOLDEN
    return _splitmix64(np.array([mixed & _MASK64], dtype=np.uint64))[0]


def init_scale(rows: int) -> float:
    """Half-width of the uniform init: sqrt(1/rows), as in the reference DLRM."""
    return math.sqrt(1.0 / rows)


# Keras' GlorotNormal draws a normal truncated at 2 standard deviations, scaled so that the truncated
# distribution keeps the std sqrt(2 / (fan_in + fan_out)); this is the std of N(0, 1) truncated at +-2.
_TRUNCATED_NORMAL_STD = 0.87962566103423978
_NORMAL_CDF_MINUS_2 = 0.5 * math.erfc(2.0 / math.sqrt(2.0))


def _from_unit(unit: np.ndarray, initializer: str, rows: int, dim: int) -> np.ndarray:
    """Uniform [0, 1) draws -> the initializer's values (float64): an inverse-CDF map, element by element."""
    if initializer == "uniform":
        return (2.0 * unit - 1.0) * init_scale(rows)
    if initializer == "glorot_normal":  # fan_in = rows, fan_out = dim, as Keras for an [rows, dim] table
        # the midpoint of the 2^-24 cell keeps p strictly inside (Phi(-2), Phi(2))
        p = _NORMAL_CDF_MINUS_2 + (unit + 0.5 / (1 << 24)) * (1.0 - 2.0 * _NORMAL_CDF_MINUS_2)
        std = math.sqrt(2.0 / (rows + dim)) / _TRUNCATED_NORMAL_STD
        return tf.math.ndtri(tf.constant(p, tf.float64)).numpy() * std
    raise ValueError(f"unknown table initializer {initializer!r}")


def initial_table_values(
    table_index: int,
    rows: int,
    dim: int,
    seed: int,
    row_range: Optional[Tuple[int, int]] = None,
    col_range: Optional[Tuple[int, int]] = None,
    initializer: str = "uniform",
) -> np.ndarray:
    """Initial values of rows [r0, r1) x columns [c0, c1) of table `table_index` (float32).

    Element (row, col) comes from u = splitmix64(key(seed, table) + (row * dim + col) * golden), a
    uniform draw that is a pure function of its coordinates, so slices generated separately tile the
    full table exactly: "uniform" is uniform in [-sqrt(1/rows), sqrt(1/rows)), "glorot_normal" the
    truncated normal of Keras' GlorotNormal through the inverse normal CDF of u, "zeros" zeros. Works in
    row chunks, so memory is proportional to the slice, never to the table.
    """
    r0, r1 = row_range if row_range is not None else (0, rows)
    c0, c1 = col_range if col_range is not None else (0, dim)
    if not (0 <= r0 <= r1 <= rows and 0 <= c0 <= c1 <= dim):
        raise ValueError(
            f"table {table_index}: slice rows [{r0}, {r1}) x cols [{c0}, {c1}) is outside the table "
            f"shape ({rows}, {dim})"
        )
    if initializer == "zeros":
        return np.zeros((r1 - r0, c1 - c0), dtype=np.float32)
    out = np.empty((r1 - r0, c1 - c0), dtype=np.float32)
    if out.size == 0:
        return out
    key = _table_key(seed, table_index)
    cols = np.arange(c0, c1, dtype=np.uint64)
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // (c1 - c0))
    with np.errstate(over="ignore"):
        for start in range(r0, r1, rows_per_chunk):
            stop = min(r1, start + rows_per_chunk)
            row_ids = np.arange(start, stop, dtype=np.uint64)
            counters = row_ids[:, None] * np.uint64(dim) + cols[None, :]
            bits = _splitmix64(counters * np.uint64(_GOLDEN) + key)
            # Top 24 bits -> a float in [0, 1) that float32 represents exactly.
            unit = (bits >> np.uint64(40)).astype(np.float64) * (1.0 / (1 << 24))
            out[start - r0 : stop - r0] = _from_unit(unit, initializer, rows, dim).astype(np.float32)
    return out


def table_initial_values(table_index: int, table: TableConfig, seed: int,
                         row_range: Optional[Tuple[int, int]] = None,
                         col_range: Optional[Tuple[int, int]] = None) -> np.ndarray:
    """`initial_table_values` of table `table_index` with its own shape and initializer (both layers use it)."""
    return initial_table_values(table_index, table.rows, table.dim, seed, row_range, col_range, table.initializer)


class LocalEmbedding(EmbeddingCollection):
    """All tables in this process; lookups are gathers, so gradients are `tf.IndexedSlices`.

    Tables are always float32 (also under mixed precision): the model casts the pooled vectors to
    its compute dtype. With one process every table is data-parallel in the trivial sense, so
    `model_parallel_variables` is empty.
    """

    def __init__(self, tables: Sequence[TableConfig], seed: int, name: str = "embeddings"):
        super().__init__(tables, name=name, dtype="float32")
        self.seed = int(seed)
        self.table_variables: List[tf.Variable] = [
            tf.Variable(
                table_initial_values(t, table, self.seed),
                trainable=True,
                dtype=tf.float32,
                name=f"embedding_table_{t}",
            )
            for t, table in enumerate(self.tables)
        ]

    def lookup_blocks(self, ids) -> List[tf.Tensor]:
        bags = self.split_ids(ids)
        return [pool(variable, bag, table.combiner, table.multi_hot)
                for variable, bag, table in zip(self.table_variables, bags, self.tables)]

    def stored_pieces(self) -> List[Tuple[TablePiece, tf.Variable]]:
        return [(self.full_piece(t), variable) for t, variable in enumerate(self.table_variables)]
