"""The one interface between the model and its embedding tables.

The model only ever calls `embeddings(ids)` (or `lookup_blocks(ids)`) with this rank's local rows of
categorical ids [B_local, total_hotness] int32 (table t in its `id_columns(t)`, -1 padding after a bag's
ids) and gets one pooled vector per (row, table) back, concatenated in table order: [B_local, total_dim]
float32 (or as column blocks of whole tables, which concatenate to that). A
single-process implementation (`local.LocalEmbedding`) and the hybrid-parallel twin
(`distributed.DistributedEmbedding`) both implement it, so the model never changes.

Checkpoints see tables as *pieces*: a rectangle (row range x column range) of one table stored by
one rank. The single-process layer has one piece per table; a sharded layer has column slices, row
slices or whole tables per rank. Saving writes each piece this rank is responsible for; restoring
reads, for each piece this rank now holds, the region it covers out of whatever pieces were saved
(possibly by a different world size).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import tensorflow as tf

from dlrm.embedding.pieces import TablePiece
from dlrm.features import TableConfig, table_problems, total_dim, total_hotness
from dlrm.keras2 import keras


class EmbeddingCollection(keras.layers.Layer):
    """ids [B, total_hotness] int32 -> pooled vectors [B, total_dim] float32."""

    def __init__(self, tables: Sequence[TableConfig], **kwargs):
        super().__init__(**kwargs)
        problems = table_problems(tables)
        if not tables or problems:
            raise ValueError("; ".join(problems) or "an embedding collection needs at least one table")
        self._table_configs: Tuple[TableConfig, ...] = tuple(tables)

    @property
    def tables(self) -> Tuple[TableConfig, ...]:
        """The tables' configurations, in id-column order."""
        return self._table_configs

    @property
    def table_sizes(self) -> List[int]:
        return [t.rows for t in self._table_configs]

    @property
    def dims(self) -> List[int]:
        return [t.dim for t in self._table_configs]

    @property
    def hotness(self) -> List[int]:
        return [t.hotness for t in self._table_configs]

    @property
    def total_hotness(self) -> int:
        return total_hotness(self._table_configs)

    @property
    def total_dim(self) -> int:
        return total_dim(self._table_configs)

    def split_ids(self, ids) -> List[tf.Tensor]:
        """ids [B, total_hotness] -> one [B, hotness] block per table (a wrong width is refused)."""
        ids = tf.convert_to_tensor(ids, dtype=tf.int32)
        if ids.shape.rank != 2 or (ids.shape[1] is not None and ids.shape[1] != self.total_hotness):
            raise ValueError(f"{type(self).__name__} expects ids of shape [batch, {self.total_hotness}] "
                             f"(the tables' hotness {self.hotness}), got {ids.shape}")
        return tf.split(ids, self.hotness, axis=1)

    def call(self, ids):
        blocks = self.lookup_blocks(ids)
        return blocks[0] if len(blocks) == 1 else tf.concat(blocks, axis=1)

    def lookup_blocks(self, ids) -> List[tf.Tensor]:
        """The pooled vectors as column blocks [B, width], each of whole tables, in table order: concatenated
        along axis 1 they are `call`'s output. The model casts them and stacks them once for its interaction,
        so a float32 concatenation of every table's vectors is never made (nor split again for the gradient)."""
        raise NotImplementedError

    def full_piece(self, table: int) -> TablePiece:
        """The whole of table `table` as one piece."""
        return TablePiece(table, 0, self.tables[table].rows, 0, self.tables[table].dim)

    def stored_pieces(self) -> List[Tuple[TablePiece, tf.Variable]]:
        """Pieces this rank writes into a checkpoint (each piece is written by exactly one rank)."""
        raise NotImplementedError

    def held_pieces(self) -> List[Tuple[TablePiece, tf.Variable]]:
        """Pieces this rank holds in memory and must fill on restore (replicated tables: all ranks)."""
        return self.stored_pieces()

    @property
    def model_parallel_variables(self) -> List[tf.Variable]:
        """Variables owned by this rank alone: not allreduced, gradient arrives via all-to-all."""
        return []
