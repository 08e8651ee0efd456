"""A plan being built: every rank's load and every table's owned pieces, changed one piece at a time."""
from __future__ import annotations

from typing import List, Optional, Sequence

from dlrm.embedding.pieces import TablePiece
from dlrm.embedding.planner.layout import TableLayout, TableSizes
from dlrm.embedding.planner.plan import OwnedPiece, Plan, PlanError, RankLoad, TablePlacement
from dlrm.sizes import format_bytes


class Assignment:
    """A plan being built: every rank's load and every table's owned pieces so far (replicas from the start)."""

    def __init__(self, tables: TableSizes, layouts: Sequence[TableLayout], budget: Optional[int]):
        self.tables = tables
        self.budget = budget
        self.ranks = [RankLoad(rank=r) for r in range(tables.world_size)]
        self.placements = [_empty_placement(tables, layout) for layout in layouts]
        for layout in layouts:
            if layout.kind == "replicated":
                self.replicate(layout.table)

    def give(self, piece: TablePiece, load: RankLoad) -> None:
        load.memory_bytes += self.tables.piece_bytes(piece)
        load.lookup_load += self.tables.piece_lookups(piece)
        load.tables.append(piece.table)
        self.placements[piece.table].pieces.append(OwnedPiece(load.rank, piece))

    def take(self, piece: TablePiece, load: RankLoad) -> None:
        """Undo `give`: `load` no longer holds `piece`."""
        load.memory_bytes -= self.tables.piece_bytes(piece)
        load.lookup_load -= self.tables.piece_lookups(piece)
        load.tables.remove(piece.table)
        self.placements[piece.table].pieces.remove(OwnedPiece(load.rank, piece))

    def move(self, piece: TablePiece, source: RankLoad, target: RankLoad) -> None:
        self.take(piece, source)
        self.give(piece, target)

    def replicate(self, table: int) -> None:
        """A full copy on every rank, looked up locally: each rank fetches for its 1/N of the batch."""
        tables = self.tables
        for load in self.ranks:
            self.placements[table].pieces.append(OwnedPiece(load.rank, tables.whole(table)))
            load.memory_bytes += tables.table_bytes(table)
            load.lookup_load += tables.hotness(table) * tables.dim(table) / tables.world_size
            load.tables.append(table)
        held = self.ranks[0].memory_bytes  # every rank holds the same replicas, and they are placed first
        if self.budget is not None and held > self.budget:
            raise PlanError(
                f"{tables.title(table)}): the replicated tables up to this one take {format_bytes(held)} on "
                f"every rank, more than the budget of {format_bytes(self.budget)}; lower --replicate_threshold "
                f"or raise --rank_memory", table=table, replicas=True)

    def eligible(self, piece: TablePiece) -> List[RankLoad]:
        """Ranks holding no other piece of the table, with room for this one."""
        size = self.tables.piece_bytes(piece)
        return [load for load in self.ranks if piece.table not in load.tables
                and (self.budget is None or load.memory_bytes + size <= self.budget)]

    def no_room(self, piece: TablePiece) -> PlanError:
        budget, tables = self.budget, self.tables
        assert budget is not None  # without a budget every piece finds a rank
        t, size = piece.table, tables.piece_bytes(piece)
        free = max((budget - load.memory_bytes for load in self.ranks if t not in load.tables), default=0)
        return PlanError(
            f"{tables.title(t)}): a piece of {format_bytes(size)} fits on "
            f"no rank; the emptiest eligible rank has {format_bytes(free)} free of "
            f"{format_bytes(budget)}, short by {format_bytes(size - free)} (the whole model needs "
            f"{format_bytes(tables.total_bytes())}, the cluster has {format_bytes(budget * tables.world_size)})",
            table=t)

    def peak_over_mean(self) -> float:
        memory = [load.memory_bytes for load in self.ranks]
        mean = sum(memory) / len(memory)
        return max(memory) / mean if mean else 1.0

    def plan(self, strategy: str) -> Plan:
        """The finished plan: pieces in row, column, rank order; each rank's tables sorted; a row-sliced
        table that ended up whole on one rank is table-wise (nothing to mask in the exchange)."""
        for placement in self.placements:
            placement.pieces.sort(key=lambda owned: (owned.piece.row_start, owned.piece.col_start, owned.rank))
            if placement.kind == "row_sliced" and len(placement.pieces) == 1:
                placement.kind = "table_wise"
        for load in self.ranks:
            load.tables.sort()
        return Plan(world_size=self.tables.world_size, strategy=strategy,
                    bytes_per_element=self.tables.bytes_per_element, optimizer_slots=self.tables.optimizer_slots,
                    tables=self.placements, ranks=self.ranks)


def _empty_placement(tables: TableSizes, layout: TableLayout) -> TablePlacement:
    config = tables.configs[layout.table]
    return TablePlacement(table=layout.table, name=config.name, rows=config.rows, dim=config.dim, kind=layout.kind,
                          pieces=[], hotness=config.hotness, combiner=config.combiner)
