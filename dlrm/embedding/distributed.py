"""Hybrid-parallel embedding tables: pieces sharded over ranks, lookups routed by all-to-all.

Each rank feeds its own data-parallel rows of ids [B_local, T] (B_local may differ between ranks
and may be 0) and gets [B_local, T, dim] back, exactly like `LocalEmbedding`. Inside:

1. Routing: for every sharded table and every piece, this rank picks the ids the piece must look up —
   all of them for a whole table or a column slice, only those inside the row range for a row slice —
   and queues (piece key on the owner, local row) for the owner. Sends are grouped by owner rank.
2. One all-to-all of int32 pairs (key, row) to the owners (the process group's `alltoall`, uneven splits).
3. Each owner gathers its pieces' rows (`tf.gather` on the shard variable: sparse gradients) and lays
   the vectors out flat, each as wide as its piece (column slices are narrower than whole rows).
4. One all-to-all of the flat vectors back, in exactly the order the ids were sent.
5. The requester scatter-adds every vector into its (row, table, column range) slot: column slices
   re-assemble side by side, and each row-sliced id gets its one partial result from its owner.
Replicated tables are ordinary data-parallel variables looked up locally.

Backward is plain autodiff: the gradient of an all-to-all is the reverse all-to-all, so each shard's
gradient sums the contributions of every rank's loss; the process group's averaging tape then
divides model-parallel gradients by the world size (docs/architecture.md, "Loss and gradients").

Every piece starts with `initial_table_values` of its own rectangle, so the sharded model equals the
single-process `LocalEmbedding` built with the same seed.

NVIDIA's `distributed_embeddings` package (GPU containers only) offers the same capability on NCCL;
it is not installable here, so it is not wired in: this layer runs on GPUs through Horovod's NCCL
all-to-all as well.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import tensorflow as tf

from dlrm import dist
from dlrm.embedding.base import EmbeddingCollection, TablePiece
from dlrm.embedding.local import initial_table_values
from dlrm.embedding.planner import Plan
from dlrm.features import TableConfig


class DistributedEmbedding(EmbeddingCollection):
    """`EmbeddingCollection` whose tables are placed on ranks according to a planner `Plan`."""

    def __init__(self, tables: Sequence[TableConfig], plan: Plan, seed: int = 0, name: str = "embeddings", *,
                 group: dist.ProcessGroup):
        """One-hot tables of one dim, placed by `plan`. `group`: the run's process group (its rank decides
        which pieces live here; its all-to-all routes the ids)."""
        super().__init__(tables, name=name, dtype="float32")
        self.dim = self.tables[0].dim if self.tables else 0
        self.plan = plan
        self.seed = int(seed)
        self.group = group
        self.rank = self.group.rank
        self.world_size = self.group.size
        self._check_plan()
        self.replicated_tables: Dict[int, tf.Variable] = {}
        self._shards: List[Tuple[TablePiece, tf.Variable]] = []  # pieces this rank owns alone
        # routes[d]: (table, piece, key on rank d) for every sharded piece owned by rank d, in plan order.
        self._routes: List[List[Tuple[int, TablePiece, int]]] = [[] for _ in range(self.world_size)]
        for placement in plan.tables:
            t, rows = placement.table, placement.rows
            if placement.kind == "replicated":
                self.replicated_tables[t] = tf.Variable(
                    initial_table_values(t, rows, self.dim, self.seed), trainable=True,
                    dtype=tf.float32, name=f"embedding_table_{t}")
                continue
            for owner, piece in placement.pieces:
                self._routes[owner].append((t, piece, len(self._routes[owner])))
                if owner == self.rank:
                    value = initial_table_values(t, rows, self.dim, self.seed,
                                                 (piece.row_start, piece.row_end),
                                                 (piece.col_start, piece.col_end))
                    variable = tf.Variable(
                        value, trainable=True, dtype=tf.float32,
                        name=f"embedding_t{t}_r{piece.row_start}-{piece.row_end}"
                             f"_c{piece.col_start}-{piece.col_end}")
                    self._shards.append((piece, variable))
        self._num_sharded = sum(len(r) for r in self._routes)
        self._shard_widths = tf.constant([p.col_end - p.col_start for p, _ in self._shards] or [0],
                                         dtype=tf.int32)

    def _check_plan(self) -> None:
        plan = self.plan
        if plan.world_size != self.world_size:
            raise ValueError(f"the embedding plan is for {plan.world_size} ranks but this job has "
                             f"{self.world_size}; re-plan with world_size={self.world_size}")
        if {plan.dim} != set(self.dims) or [t.rows for t in plan.tables] != self.table_sizes:
            raise ValueError(f"the embedding plan (dim {plan.dim}, rows {[t.rows for t in plan.tables]}) "
                             f"does not match the tables (dims {self.dims}, rows {self.table_sizes})")

    # -- EmbeddingCollection interface ------------------------------------------------------------
    @property
    def model_parallel_variables(self) -> List[tf.Variable]:
        return [variable for _, variable in self._shards]

    def stored_pieces(self) -> List[Tuple[TablePiece, tf.Variable]]:
        """Own shards, plus the replicated tables on rank 0 only (each piece written once)."""
        pieces = list(self._shards)
        if self.rank == 0:
            pieces += self._replicated_pieces()
        return sorted(pieces, key=lambda item: (item[0].table, item[0].row_start, item[0].col_start))

    def held_pieces(self) -> List[Tuple[TablePiece, tf.Variable]]:
        pieces = list(self._shards) + self._replicated_pieces()
        return sorted(pieces, key=lambda item: (item[0].table, item[0].row_start, item[0].col_start))

    def _replicated_pieces(self) -> List[Tuple[TablePiece, tf.Variable]]:
        return [(TablePiece(t, 0, self.table_sizes[t], 0, self.dim), variable)
                for t, variable in self.replicated_tables.items()]

    # -- forward ----------------------------------------------------------------------------------
    def call(self, ids):
        ids = tf.convert_to_tensor(ids, dtype=tf.int32)
        num_tables = len(self.table_sizes)
        if ids.shape.rank != 2 or (ids.shape[1] is not None and ids.shape[1] != num_tables):
            raise ValueError(f"DistributedEmbedding expects ids of shape [batch, {num_tables}], "
                             f"got {ids.shape}")
        self._check_ids(ids)
        batch = tf.shape(ids)[0]
        # Replicated lookups first and in fixed name scopes: inside tf.function, Horovod names the
        # allreduce of their gradients after the gradient tensors' op names, which must therefore be
        # the same on every rank, whatever shards each rank holds.
        replicated = {}
        for t, table in self.replicated_tables.items():
            with tf.name_scope(f"replicated_table_{t}"):
                replicated[t] = tf.gather(table, ids[:, t])
        if not self._num_sharded:
            return tf.concat([replicated[t] for t in range(num_tables)], axis=1)
        sharded = self._sharded_lookup(ids, batch)
        if not replicated:
            return tf.reshape(sharded, [batch, num_tables * self.dim])
        columns = [replicated[t] if t in replicated else sharded[:, t, :] for t in range(num_tables)]
        return tf.concat(columns, axis=1)

    def _check_ids(self, ids) -> None:
        """Out-of-range ids would fail on the owner rank with a confusing error: stop them here."""
        limits = tf.constant(self.table_sizes, dtype=tf.int32)
        bad = tf.logical_or(ids < 0, ids >= limits[None, :])
        bad_tables = tf.where(tf.reduce_any(bad, axis=0))[:, 0]
        tf.debugging.Assert(
            tf.equal(tf.size(bad_tables), 0),
            [f"categorical ids out of range on rank {self.rank} (table sizes {self.table_sizes}); "
             f"offending table indices:", bad_tables])

    def _sharded_lookup(self, ids, batch):
        num_tables, dim = len(self.table_sizes), self.dim
        send_pairs, send_positions, send_counts = [], [], []
        for routes in self._routes:
            count = tf.constant(0, tf.int32)
            for t, piece, key in routes:
                column = ids[:, t]
                if piece.row_start > 0 or piece.row_end < self.table_sizes[t]:
                    inside = tf.logical_and(column >= piece.row_start, column < piece.row_end)
                    samples = tf.cast(tf.where(inside)[:, 0], tf.int32)
                    rows = tf.gather(column, samples) - piece.row_start
                else:
                    samples = tf.range(batch, dtype=tf.int32)
                    rows = column
                n = tf.shape(samples)[0]
                send_pairs.append(tf.stack([tf.fill([n], key), rows], axis=1))
                # Where each returned value goes in the flat [batch, T, dim] output.
                start = (tf.cast(samples, tf.int64) * num_tables + t) * dim + piece.col_start
                width = piece.col_end - piece.col_start
                send_positions.append(tf.reshape(
                    start[:, None] + tf.range(width, dtype=tf.int64)[None, :], [-1]))
                count += n
            send_counts.append(count)
        received, received_splits = self.group.alltoall(
            tf.concat(send_pairs, axis=0), tf.stack(send_counts), name=f"{self.name}_ids")
        vectors = self._owner_lookup(received, received_splits)
        returned, _ = self.group.alltoall(vectors[0], vectors[1], name=f"{self.name}_vectors")
        flat = tf.math.unsorted_segment_sum(
            returned, tf.concat(send_positions, axis=0),
            tf.cast(batch, tf.int64) * num_tables * dim)
        return tf.reshape(flat, [batch, num_tables, dim])

    def _owner_lookup(self, received, received_splits):
        """Owner side: look up every received (key, row) pair; return flat vectors and their splits."""
        keys, rows = received[:, 0], received[:, 1]
        widths = tf.gather(self._shard_widths, keys)
        offsets = tf.cumsum(widths, exclusive=True)
        values, slots = [tf.zeros([0], tf.float32)], [tf.zeros([0], tf.int32)]
        # One pass splits the received positions by shard key (order kept within each shard).
        by_shard = (tf.dynamic_partition(tf.range(tf.shape(keys)[0]), keys, len(self._shards))
                    if self._shards else [])
        for (piece, variable), mine in zip(self._shards, by_shard):
            found = tf.gather(variable, tf.gather(rows, mine))  # sparse gradient on the shard
            width = piece.col_end - piece.col_start
            values.append(tf.reshape(found, [-1]))
            slots.append(tf.reshape(tf.gather(offsets, mine)[:, None] + tf.range(width)[None, :], [-1]))
        total = tf.reduce_sum(widths)
        flat = tf.math.unsorted_segment_sum(tf.concat(values, 0), tf.concat(slots, 0), total)
        source = tf.repeat(tf.range(self.world_size), received_splits)
        return_splits = tf.math.unsorted_segment_sum(widths, source, self.world_size)
        return flat, return_splits
