"""Hybrid-parallel embedding tables: pieces sharded over ranks, bags pooled on their owners.

Each rank feeds its own data-parallel rows of ids [B_local, total_hotness] (B_local may differ between
ranks by one row and may be 0) and gets [B_local, total_dim] back, exactly like `LocalEmbedding`. The
exchange's shape is static (`dlrm.embedding.exchange`), worked out once from the plan:

1. Requester: for every rank d, one block of ids [B_local, id_width(d)]: the id columns of the tables
   whose pieces d owns, side by side (static column slices). For a row slice, ids outside its rows
   become padding (-1) and the others are shifted to the slice's first row.
2. One all-to-all of the blocks (int32, B_local x id_width(d) to rank d). The owner's received buffer is
   [sum of the sources' B, id_width(own)] whatever each source's batch slice. The blocks depend on the
   batch alone, so training may run this all-to-all before the step (`ids_to_send`, then the step traced
   inside `ids_received`: `dlrm.train.ids_ahead`).
3. Owner: pools every piece's columns on its shard variable (`dlrm.embedding.pooling`: the same code as
   `LocalEmbedding`; gathers of the real ids only, so shard gradients are sparse `tf.IndexedSlices`)
   and returns one vector per (row, piece): [rows, vector_width(own)]. A row slice returns the partial
   sum of the ids it holds.
4. One all-to-all back. The requester places every returned block of `block` floats (the gcd of the
   dims and piece widths) in its output row with one `tf.dynamic_stitch` (`dlrm.embedding.blocks`):
   column slices land side by side; the partial sums of row slices are added up first (a mean divides
   them by the bag's count, which the requester knows from its own ids: no count travels).
Replicated tables are ordinary data-parallel variables pooled locally.

Backward: the gradient of an all-to-all is the reverse all-to-all, and the stitch's gradient is one
gather per source (its positions form a permutation), so nothing is scattered element by element. Each
shard's gradient sums the contributions of every rank's loss; the process group's averaging tape
divides model-parallel gradients by the world size (docs/architecture.md, "Loss and gradients").

Every piece starts with `table_initial_values` of its own rectangle, so the sharded model equals the
single-process `LocalEmbedding` built with the same seed.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf

from dlrm import dist
from dlrm.embedding.base import EmbeddingCollection, TablePiece
from dlrm.embedding.blocks import stitch_blocks
from dlrm.embedding.exchange import Exchange, Route, TableAssembly
from dlrm.embedding.local import table_initial_values
from dlrm.embedding.planner import Plan
from dlrm.embedding.pooling import bag_counts, bag_sums, mean_of, pool
from dlrm.features import PADDING_ID, TableConfig


class DistributedEmbedding(EmbeddingCollection):
    """`EmbeddingCollection` whose tables are placed on ranks according to a planner `Plan`."""

    def __init__(self, tables: Sequence[TableConfig], plan: Plan, seed: int, name: str = "embeddings", *,
                 group: dist.ProcessGroup):
        """`group`: the run's process group (its rank decides which pieces live here; its all-to-all
        moves the ids and vectors). The plan must be for `group.size` ranks and these tables."""
        super().__init__(tables, name=name, dtype="float32")
        self.plan = plan
        self.seed = int(seed)
        self.group = group
        self.rank = self.group.rank
        self.world_size = self.group.size
        self._check_plan()
        self.replicated_tables: Dict[int, tf.Variable] = {}
        self._shards: List[Tuple[TablePiece, tf.Variable]] = []  # pieces this rank owns alone, in plan order
        sharded: Dict[int, List[Tuple[int, TablePiece]]] = {}
        for t, (table, placement) in enumerate(zip(self.tables, plan.tables)):
            if placement.kind == "replicated":
                self.replicated_tables[t] = tf.Variable(
                    table_initial_values(t, table, self.seed), trainable=True,
                    dtype=tf.float32, name=f"embedding_table_{t}")
                continue
            sharded[t] = [(owner, piece) for owner, piece in placement.pieces]
            for owner, piece in sharded[t]:
                if owner == self.rank:
                    self._shards.append((piece, self._shard_variable(piece)))
        self.exchange = Exchange(self.tables, sharded, self.world_size)
        self._received: Optional[Tuple[tf.Tensor, tf.Tensor]] = None  # set by `ids_received`

    def _shard_variable(self, piece: TablePiece) -> tf.Variable:
        table = self.tables[piece.table]
        value = table_initial_values(piece.table, table, self.seed,
                                     (piece.row_start, piece.row_end), (piece.col_start, piece.col_end))
        return tf.Variable(value, trainable=True, dtype=tf.float32,
                           name=f"embedding_t{piece.table}_r{piece.row_start}-{piece.row_end}"
                                f"_c{piece.col_start}-{piece.col_end}")

    def _shard_of(self, piece: TablePiece) -> tf.Variable:
        return next(variable for owned, variable in self._shards if owned == piece)

    def _check_plan(self) -> None:
        plan = self.plan
        if plan.world_size != self.world_size:
            raise ValueError(f"the embedding plan is for {plan.world_size} ranks but this job has "
                             f"{self.world_size}; re-plan with world_size={self.world_size}")
        problems = [] if len(plan.tables) == len(self.tables) else [
            f"{len(plan.tables)} tables planned, {len(self.tables)} given"]
        for t, (table, placement) in enumerate(zip(self.tables, plan.tables)):
            pieces = [piece for _, piece in placement.pieces]
            outside = [p for p in pieces if p.table != t or p.row_end > table.rows or p.col_end > table.dim]
            area = sum(p.shape[0] * p.shape[1] for p in pieces)
            if outside or (placement.kind != "replicated" and area != table.rows * table.dim):
                problems.append(f"table {t} ({table.name!r}, {table.rows} rows x {table.dim}) has pieces "
                                f"{[(p.row_start, p.row_end, p.col_start, p.col_end) for p in pieces]}")
        if problems:
            raise ValueError(f"the embedding plan does not match the tables: {'; '.join(problems)}")

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
        return [(self.full_piece(t), variable) for t, variable in self.replicated_tables.items()]

    # -- forward ----------------------------------------------------------------------------------
    def lookup_blocks(self, ids) -> List[tf.Tensor]:
        ids = tf.convert_to_tensor(ids, dtype=tf.int32)
        bags = self.split_ids(ids)
        if self._received is None:  # else `ids_to_send` checked them
            self._check_ids(ids)
        replicated = {}
        # Replicated lookups first and in fixed name scopes: inside tf.function, Horovod names the
        # allgather of their gradients after the gradient tensors' op names, which must therefore be
        # the same on every rank, whatever shards each rank holds.
        for t, variable in self.replicated_tables.items():
            with tf.name_scope(f"replicated_table_{t}"):
                table = self.tables[t]
                replicated[t] = pool(variable, bags[t], table.combiner, table.multi_hot)
        if not self.exchange.returned_order:
            return [replicated[t] for t in range(len(self.tables))]
        return [self._sharded_lookup(bags, replicated)]

    def _check_ids(self, ids) -> None:
        """Out-of-range ids would fail on the owner rank with a confusing error: stop them here."""
        column_table = [t for t, table in enumerate(self.tables) for _ in range(table.hotness)]
        high = tf.constant([self.tables[t].rows for t in column_table], dtype=tf.int32)
        low = tf.constant([PADDING_ID if self.tables[t].multi_hot else 0 for t in column_table], tf.int32)
        bad = tf.reduce_any(tf.logical_or(ids < low[None, :], ids >= high[None, :]), axis=0)
        bad_tables = tf.gather(tf.constant(column_table, tf.int32), tf.where(bad)[:, 0])
        tf.debugging.Assert(
            tf.equal(tf.size(bad_tables), 0),
            [f"categorical ids out of range on rank {self.rank} (tables {[t.name for t in self.tables]}, "
             f"rows {self.table_sizes}); offending table indices:", bad_tables])

    @property
    def exchanges_ids(self) -> bool:
        """Whether a lookup sends ids to other ranks (some table is sharded and there are other ranks)."""
        return self.world_size > 1 and bool(self.exchange.returned_order)

    def ids_to_send(self, ids) -> Tuple[tf.Tensor, tf.Tensor]:
        """(the flat int32 ids this rank sends, rows per destination rank): the first all-to-all's input,
        which depends on the batch alone. Out-of-range ids fail here, before they travel."""
        ids = tf.convert_to_tensor(ids, dtype=tf.int32)
        self._check_ids(ids)
        return self._ids_to_send(self.split_ids(ids))

    @contextlib.contextmanager
    def ids_received(self, received, received_splits) -> Iterator[None]:
        """While a step is traced inside this, its lookup takes these as the first all-to-all's output
        (the ids were exchanged before the step: `ids_to_send`, `ProcessGroup.start_alltoall`)."""
        previous, self._received = self._received, (received, received_splits)
        try:
            yield
        finally:
            self._received = previous

    def _ids_to_send(self, bags: List[tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
        exchange, world = self.exchange, self.world_size
        id_widths = tf.constant([exchange.id_width(d) for d in range(world)], tf.int32)
        send = tf.concat([self._ids_for(bags, exchange.routes[d]) for d in range(world)], axis=0)
        return send, tf.shape(bags[0])[0] * id_widths

    def _sharded_lookup(self, bags: List[tf.Tensor], replicated: Dict[int, tf.Tensor]) -> tf.Tensor:
        """The output [B_local, total_dim]: sharded tables through the two all-to-alls, plus `replicated`."""
        exchange, world = self.exchange, self.world_size
        batch = tf.shape(bags[0])[0]
        if self._received is None:
            received, received_splits = self.group.alltoall(*self._ids_to_send(bags), name=f"{self.name}_ids")
        else:
            received, received_splits = self._received
        own_ids, own_width = exchange.id_width(self.rank), exchange.vector_width(self.rank)
        return_splits = (received_splits // own_ids * own_width if own_ids
                         else tf.zeros([world], tf.int32))
        returned, _ = self.group.alltoall(self._owner_pool(received), return_splits,
                                          name=f"{self.name}_vectors")
        blocks = tf.reshape(returned, [-1, exchange.block])
        positions, partials = self._returned_positions(batch)
        indices, data = [positions], [blocks]
        extras = {(t, 0): vectors for t, vectors in replicated.items()}
        for t, assembly in exchange.assembly.items():
            extras.update(self._row_sliced_sums(assembly, blocks, partials, bags[t]))
        row = tf.range(batch)[:, None]
        for (table, col_start), vectors in extras.items():
            first = exchange.output_block(table, col_start)
            width = vectors.shape[1] // exchange.block
            indices.append(tf.reshape(row * exchange.output_blocks + tf.range(first, first + width)[None, :], [-1]))
            data.append(tf.reshape(vectors, [-1, exchange.block]))
        out = stitch_blocks(indices, data, batch * exchange.output_blocks, overflow=exchange.partial_blocks > 0)
        return tf.reshape(out, [batch, sum(self.dims)])

    def _returned_positions(self, batch) -> Tuple[tf.Tensor, Dict[int, tf.Tensor]]:
        """(where each returned block goes: its output block, or an overflow slot past the output for a row
        slice's; {index in returned_order: positions in the returned blocks of that row slice's vectors})."""
        exchange = self.exchange
        row = tf.range(batch)[:, None]
        overflow_start = batch * exchange.output_blocks
        positions, partials = [], {}
        start, index = tf.constant(0, tf.int32), 0
        for d in range(self.world_size):
            targets, slots = exchange.returned_targets(d)
            if not targets:
                continue
            slot = tf.constant(slots, tf.int32)[None, :]
            place = tf.where(slot >= 0, overflow_start + row * exchange.partial_blocks + slot,
                             row * exchange.output_blocks + tf.constant(targets, tf.int32)[None, :])
            positions.append(tf.reshape(place, [-1]))
            mine = start + row * len(targets) + tf.range(len(targets))[None, :]  # [B, blocks of rank d]
            first = 0
            for route in exchange.routes[d]:
                width = route.width // exchange.block
                if route.row_slice:
                    partials[index] = tf.reshape(mine[:, first:first + width], [-1])
                first, index = first + width, index + 1
            start += batch * len(targets)
        return tf.concat(positions, axis=0), partials

    def _row_sliced_sums(self, assembly: TableAssembly, blocks, partials: Dict[int, tf.Tensor], bag
                         ) -> Dict[Tuple[int, int], tf.Tensor]:
        """{(table, first column): pooled vectors} of a table's row-sliced column ranges: the partial sums
        of its row slices added up (divided by the bag's count for a mean)."""
        table = self.tables[assembly.table]
        pooled = {}
        for group in assembly.column_groups:
            if group[0] not in partials:
                continue  # a whole-row piece: its blocks go straight to the output
            piece = self.exchange.returned_order[group[0]].piece
            width = piece.col_end - piece.col_start
            parts = [tf.reshape(tf.gather(blocks, partials[i]), [-1, width]) for i in group]
            summed = parts[0] if len(parts) == 1 else tf.add_n(parts)
            if table.multi_hot and table.combiner == "mean":
                summed = mean_of(summed, bag_counts(bag))
            pooled[(assembly.table, piece.col_start)] = summed
        return pooled

    @staticmethod
    def _ids_for(bags: List[tf.Tensor], routes: List[Route]) -> tf.Tensor:
        """The flat [B_local x id_width] block of ids one owner receives from this rank."""
        if not routes:
            return tf.zeros([0], tf.int32)
        columns = []
        for route in routes:
            bag = bags[route.table]
            if route.row_slice:
                start, end = route.piece.row_start, route.piece.row_end
                bag = tf.where(tf.logical_and(bag >= start, bag < end), bag - start, PADDING_ID)
            columns.append(bag)
        return tf.reshape(tf.concat(columns, axis=1), [-1])

    def _owner_pool(self, received) -> tf.Tensor:
        """Owner side: pool the received bags of every piece it owns; flat [rows x vector_width]."""
        routes = self.exchange.routes[self.rank]
        if not routes:
            return tf.zeros([0], tf.float32)
        block = tf.reshape(received, [-1, self.exchange.id_width(self.rank)])
        vectors = []
        for route, bag in zip(routes, tf.split(block, [route.hotness for route in routes], axis=1)):
            table, variable = self.tables[route.table], self._shard_of(route.piece)
            vectors.append(bag_sums(variable, bag) if route.row_slice
                           else pool(variable, bag, table.combiner, table.multi_hot))
        return tf.reshape(tf.concat(vectors, axis=1), [-1])
