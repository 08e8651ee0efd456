"""The static shape of the hybrid-parallel exchange, worked out once from the plan (pure Python).

Every rank computes the same `Exchange` from the same plan, so the all-to-alls need no negotiation of
what travels: rank d receives, from every rank, a block of ids [rows, `id_width(d)`] holding the
columns of the tables whose pieces d owns (`routes[d]`, in plan order), and sends back one block of
pooled vectors [rows, `vector_width(d)`], each piece's vector as wide as the piece. `assembly` says
how the requester puts the returned vectors together into each table's pooled vector: column slices
side by side, the partial sums of row slices added up.

The requester moves vectors in *blocks* of `block` floats (the largest width that divides every table's
dim and every piece's column range): each returned block of a table-wise or column-sliced piece has one
place in the output row (`returned_targets`), so the whole output is put together by one stitch of
blocks instead of per-piece splits and per-table concatenations; blocks of row slices go to overflow
slots first (their partial sums are added before they reach the output).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from dlrm.embedding.pieces import TablePiece
from dlrm.features import TableConfig


@dataclass(frozen=True)
class Route:
    """One sharded piece as the exchange sees it: its table and whether it holds only some rows."""

    piece: TablePiece
    hotness: int
    row_slice: bool  # the piece covers part of the table's rows: its owner returns a partial sum

    @property
    def table(self) -> int:
        return self.piece.table

    @property
    def width(self) -> int:
        return self.piece.col_end - self.piece.col_start


@dataclass(frozen=True)
class TableAssembly:
    """How the requester builds table `table`'s pooled vector from the returned piece vectors.

    `column_groups`: for each column range in column order, the indices (in `Exchange.returned_order`)
    of the pieces covering it; more than one means row slices whose partial sums add up.
    """

    table: int
    column_groups: Tuple[Tuple[int, ...], ...]


class Exchange:
    """Routes of every rank's pieces and the assembly of every sharded table, for one plan."""

    def __init__(self, tables: Sequence[TableConfig], sharded: Dict[int, List[Tuple[int, TablePiece]]],
                 world_size: int):
        """`sharded[t]`: (owner rank, piece) of every piece of sharded table t, in plan order."""
        self.world_size = world_size
        self.routes: List[List[Route]] = [[] for _ in range(world_size)]
        for t, pieces in sharded.items():
            for owner, piece in pieces:
                row_slice = piece.row_start > 0 or piece.row_end < tables[t].rows
                self.routes[owner].append(Route(piece, tables[t].hotness, row_slice))
        self.returned_order: List[Route] = [route for routes in self.routes for route in routes]
        self.assembly: Dict[int, TableAssembly] = {t: self._assemble(t) for t in sharded}
        edges = [table.dim for table in tables] + [edge for route in self.returned_order
                                                    for edge in (route.piece.col_start, route.piece.col_end)]
        self.block = math.gcd(*edges)
        self.output_blocks = sum(table.dim for table in tables) // self.block
        self._table_block = [sum(table.dim for table in tables[:t]) // self.block for t in range(len(tables))]
        self.partial_blocks = sum(route.width for route in self.returned_order if route.row_slice) // self.block

    def output_block(self, table: int, col_start: int = 0) -> int:
        """Index, within an output row, of the block holding column `col_start` of table `table`."""
        return self._table_block[table] + col_start // self.block

    def returned_targets(self, rank: int) -> Tuple[List[int], List[int]]:
        """For each block of a row returned by `rank`: (its output block, or -1 for a row slice's;
        its overflow slot among all row slices' blocks, or -1)."""
        targets, slots = [], []
        slot = sum(route.width for d in range(rank) for route in self.routes[d] if route.row_slice) // self.block
        for route in self.routes[rank]:
            for k in range(route.width // self.block):
                if route.row_slice:
                    targets.append(-1)
                    slots.append(slot)
                    slot += 1
                else:
                    targets.append(self.output_block(route.table, route.piece.col_start) + k)
                    slots.append(-1)
        return targets, slots

    def id_width(self, rank: int) -> int:
        """Id columns per row that `rank` receives (its pieces' tables' hotness, summed)."""
        return sum(route.hotness for route in self.routes[rank])

    def vector_width(self, rank: int) -> int:
        """Floats per row that `rank` sends back (its pieces' widths, summed)."""
        return sum(route.width for route in self.routes[rank])

    def _assemble(self, table: int) -> TableAssembly:
        groups: Dict[Tuple[int, int], List[int]] = {}
        for index, route in enumerate(self.returned_order):
            if route.table == table:
                groups.setdefault((route.piece.col_start, route.piece.col_end), []).append(index)
        return TableAssembly(table, tuple(tuple(groups[key]) for key in sorted(groups)))
