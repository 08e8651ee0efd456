"""Strategies, the planner's second stage: which rank holds every piece of the layout.

- ``basic``: pieces dealt round-robin over ranks in table order, ignoring sizes (NVIDIA's "basic").
- ``memory_balanced`` (default): largest piece first, each onto the rank with the lowest combined
  share of total memory plus share of total lookups; row-sliced tables last, cut so that every rank
  fills up to one common level. Largest-first keeps the peak per-rank memory (what decides whether a
  model fits) near the mean; the lookup term then spreads the many tiny tables so that no rank
  receives most of the all-to-all traffic. `basic` can overflow a rank (or leave it idle) whenever
  table sizes differ by orders of magnitude, as Criteo's do.

Replicated tables are on every rank whatever the strategy.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence

from dlrm.config import ShardingConfig
from dlrm.embedding.pieces import TablePiece
from dlrm.embedding.planner.byte_sizes import format_bytes
from dlrm.embedding.planner.layout import TableLayout, Tables, lay_out
from dlrm.embedding.planner.plan import OwnedPiece, Plan, PlanError, RankLoad, TablePlacement


class Assignment:
    """A plan being built: every rank's load and every table's owned pieces so far."""

    def __init__(self, tables: Tables, layouts: Sequence[TableLayout], budget: Optional[int]):
        self.tables = tables
        self.budget = budget
        self.ranks = [RankLoad(rank=r) for r in range(tables.world_size)]
        self.placements = [TablePlacement(table=layout.table, rows=tables.rows[layout.table], kind=layout.kind,
                                          pieces=[], lookups_per_sample=tables.lookups[layout.table])
                           for layout in layouts]

    def give(self, piece: TablePiece, load: RankLoad) -> None:
        load.memory_bytes += self.tables.piece_bytes(piece)
        load.lookup_load += self.tables.piece_lookups(piece)
        load.tables.append(piece.table)
        self.placements[piece.table].pieces.append(OwnedPiece(load.rank, piece))

    def replicate(self, table: int) -> None:
        """A full copy on every rank, looked up locally: each rank fetches for its 1/N of the batch."""
        tables = self.tables
        whole = TablePiece(table, 0, tables.rows[table], 0, tables.dim)
        for load in self.ranks:
            self.placements[table].pieces.append(OwnedPiece(load.rank, whole))
            load.memory_bytes += tables.table_bytes(table)
            load.lookup_load += tables.lookups[table] * tables.dim / tables.world_size
            load.tables.append(table)

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

    def plan(self, strategy: str) -> Plan:
        """The finished plan: pieces in row, column, rank order; each rank's tables sorted."""
        for placement in self.placements:
            placement.pieces.sort(key=lambda owned: (owned.piece.row_start, owned.piece.col_start, owned.rank))
        for load in self.ranks:
            load.tables.sort()
        return Plan(world_size=self.tables.world_size, dim=self.tables.dim, strategy=strategy,
                    bytes_per_element=self.tables.bytes_per_element, optimizer_slots=self.tables.optimizer_slots,
                    tables=self.placements, ranks=self.ranks)


def _sharded_slices(layouts: Sequence[TableLayout]) -> List[TablePiece]:
    return [piece for layout in layouts if layout.kind != "replicated" for piece in layout.slices]


def place_basic(assignment: Assignment, layouts: Sequence[TableLayout]) -> None:
    """Round robin in table order: each piece to the next rank after the previous piece's that can take it."""
    world_size = assignment.tables.world_size
    next_rank = 0
    for piece in _sharded_slices(layouts):
        eligible = {load.rank for load in assignment.eligible(piece)}
        if not eligible:
            raise assignment.no_room(piece)
        chosen = next(rank for rank in ((next_rank + i) % world_size for i in range(world_size)) if rank in eligible)
        assignment.give(piece, assignment.ranks[chosen])
        next_rank = (chosen + 1) % world_size


def place_memory_balanced(assignment: Assignment, layouts: Sequence[TableLayout]) -> None:
    """Largest piece first onto the rank with the lowest memory share plus lookup share, then the
    row-sliced tables cut to fill every rank to one level."""
    tables = assignment.tables
    total_bytes = max(tables.total_bytes(), 1)
    total_lookups = max(sum(hotness * tables.dim for hotness in tables.lookups), 1e-9)
    whole = [layout for layout in layouts if layout.kind != "row_sliced"]
    # Largest first; the stable sort keeps table order among equal sizes (deterministic plans).
    for piece in sorted(_sharded_slices(whole), key=lambda piece: -tables.piece_bytes(piece)):
        eligible = assignment.eligible(piece)
        if not eligible:
            raise assignment.no_room(piece)
        size, lookups = tables.piece_bytes(piece), tables.piece_lookups(piece)
        assignment.give(piece, _least_loaded(eligible, size, lookups, total_bytes, total_lookups))
    fill_row_slices(assignment, [layout.table for layout in layouts if layout.kind == "row_sliced"])


def _least_loaded(eligible: Sequence[RankLoad], size: int, lookups: float, total_bytes: int,
                  total_lookups: float) -> RankLoad:
    """The rank whose share of all memory plus share of all lookups is lowest once it holds the piece."""
    return min(eligible, key=lambda load: (
        (load.memory_bytes + size) / total_bytes + (load.lookup_load + lookups) / total_lookups, load.rank))


def water_level(loads: Sequence[int], amount: int) -> float:
    """Level L with sum(max(0, L - load)) == amount: pouring `amount` onto the emptiest ranks."""
    ordered = sorted(loads)
    for k in range(len(ordered), 0, -1):
        level = (amount + sum(ordered[:k])) / k
        if level >= ordered[k - 1]:
            return level
    return ordered[0] + amount  # unreachable with k == 1, kept for type checkers


def fill_row_slices(assignment: Assignment, fluid: Sequence[int]) -> None:
    """Cut the tables in `fluid` (largest first) into contiguous row ranges that fill every rank up
    to one common level: the emptiest ranks take the most rows, so per-rank memory ends up even."""
    if not fluid:
        return
    tables, budget = assignment.tables, assignment.budget
    assert budget is not None  # tables are row-sliced only to fit a budget
    row_bytes = tables.dim * tables.element_bytes
    level = water_level([load.memory_bytes for load in assignment.ranks],
                        sum(tables.rows[t] * row_bytes for t in fluid))
    if level > budget:
        t = max(fluid, key=lambda i: tables.rows[i])
        raise PlanError(
            f"{tables.title(t)}) and the other row-sliced tables do not fit: "
            f"spreading them evenly needs {format_bytes(level)} on the fullest ranks, short by "
            f"{format_bytes(level - budget)} per rank over the budget of {format_bytes(budget)}", table=t)
    for t in sorted(fluid, key=lambda i: -tables.rows[i]):
        _fill_table(assignment, t, level, budget)


def _fill_table(assignment: Assignment, table: int, level: float, budget: int) -> None:
    """Row ranges of `table` onto the emptiest ranks first, each up to `level`; the last rank takes the rest."""
    tables = assignment.tables
    row, rows, row_bytes = 0, tables.rows[table], tables.dim * tables.element_bytes
    by_room = sorted(assignment.ranks, key=lambda load: (load.memory_bytes - level, load.rank))
    for i, load in enumerate(by_room):
        last = i == len(by_room) - 1
        take = rows - row if last else min(rows - row, _rows_up_to_level(load, level, row_bytes, budget))
        if take <= 0:
            continue
        if load.memory_bytes + take * row_bytes > budget:
            raise PlanError(
                f"{tables.title(table)}): rows [{row:,}:{rows:,}) fit on no rank, "
                f"short by {format_bytes(load.memory_bytes + take * row_bytes - budget)}", table=table)
        assignment.give(TablePiece(table, row, row + take, 0, tables.dim), load)
        row += take
        if row == rows:
            break


def _rows_up_to_level(load: RankLoad, level: float, row_bytes: int, budget: int) -> int:
    """Rows that fill `load` up to `level`, rounded up (at most one row over the level, so no sliver is
    left for the next rank); rounded down only where rounding up would break the budget."""
    room = max(0.0, level - load.memory_bytes)
    room_rows = math.ceil(room / row_bytes)
    if load.memory_bytes + room_rows * row_bytes > budget:
        room_rows = int(room // row_bytes)
    return room_rows


Strategy = Callable[[Assignment, Sequence[TableLayout]], None]
STRATEGY_FUNCTIONS: Dict[str, Strategy] = {"basic": place_basic, "memory_balanced": place_memory_balanced}
STRATEGIES = tuple(STRATEGY_FUNCTIONS)


def check_strategy(name: str) -> Strategy:
    """The placement function called `name`; ValueError naming the choices otherwise."""
    try:
        return STRATEGY_FUNCTIONS[name]
    except KeyError:
        raise ValueError(f"unknown sharding strategy {name!r}; choose one of {STRATEGIES}") from None


def place(tables: Tables, cfg: ShardingConfig) -> Plan:
    """One placement attempt within `cfg`'s budget: PlanError when some piece finds no rank."""
    strategy = check_strategy(cfg.strategy)
    layouts = lay_out(tables, cfg)
    assignment = Assignment(tables, layouts, cfg.rank_memory_bytes)
    for layout in layouts:
        if layout.kind == "replicated":
            assignment.replicate(layout.table)
    strategy(assignment, layouts)
    return assignment.plan(cfg.strategy)
