"""The one interface between the model and its embedding tables.

The model only ever calls `embeddings(ids)` with this rank's local rows of categorical ids
[B_local, total_hotness] int32 and gets the tables' vectors concatenated [B_local, total_dim] back
(table t at `FeatureContract.vector_columns(t)`). A single-process
implementation (`local.LocalEmbedding`) and the hybrid-parallel twin
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
from dlrm.features import TableConfig


class EmbeddingCollection(tf.keras.layers.Layer):
    """ids [B, total_hotness] int32 -> vectors [B, total_dim] float32."""

    def __init__(self, tables: Sequence[TableConfig], **kwargs):
        super().__init__(**kwargs)
        self._table_configs = tuple(tables)

    @property
    def tables(self) -> Tuple[TableConfig, ...]:
        return self._table_configs

    @property
    def table_sizes(self) -> List[int]:
        return [t.rows for t in self.tables]

    @property
    def dims(self) -> List[int]:
        return [t.dim for t in self.tables]

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
