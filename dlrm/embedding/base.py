"""The one interface between the model and its embedding tables.

The model only ever calls `embeddings(ids)` with this rank's local rows of categorical ids
[B_local, num_tables] int32 and gets vectors [B_local, num_tables, dim] back. A single-process
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


class EmbeddingCollection(tf.keras.layers.Layer):
    """ids [B, num_tables] int32 -> vectors [B, num_tables, dim] float32."""

    def __init__(self, table_sizes: Sequence[int], dim: int, **kwargs):
        super().__init__(**kwargs)
        self.table_sizes = [int(n) for n in table_sizes]
        self.dim = int(dim)

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
