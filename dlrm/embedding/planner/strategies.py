"""Strategies, the planner's second stage: which rank holds every piece of the layout.

- ``basic``: pieces dealt round-robin over ranks in table order, ignoring sizes (NVIDIA's "basic").
- ``memory_balanced`` (default): largest piece first, each onto the rank with the lowest combined
  share of total memory plus share of total lookups; row-sliced tables last, cut so that every rank
  fills up to one common level. Tables that would leave the ranks uneven as whole pieces are row-sliced
  too, largest first, as few as keep every rank within BALANCE_TOLERANCE of the even share: the peak
  per-rank memory decides whether a model fits, and every row slice costs exchange traffic (each of its
  owners receives all ids of the table). The lookup term spreads the many tiny tables so that no rank
  receives most of the all-to-all traffic. Last, whole pieces move between ranks to even out the
  lookup load within the memory tolerance (`lookup_balance`). `basic` can overflow a rank (or leave it
  idle) whenever table sizes differ by orders of magnitude, as Criteo's do.

Replicated tables are on every rank whatever the strategy.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Dict, Iterator, List, Optional, Sequence

from dlrm.choices import named_choice
from dlrm.config import ShardingConfig
from dlrm.embedding.pieces import TablePiece
from dlrm.embedding.planner.assignment import Assignment
from dlrm.embedding.planner.layout import TableLayout, TableSizes, lay_out
from dlrm.embedding.planner.lookup_balance import even_out_lookups
from dlrm.embedding.planner.plan import Plan, PlanError, RankLoad
from dlrm.sizes import format_bytes

BALANCE_TOLERANCE = 0.05  # memory_balanced: the fullest rank holds at most 5% over the even share


def _sharded_slices(layouts: Sequence[TableLayout]) -> List[TablePiece]:
    return [piece for layout in layouts if layout.kind != "replicated" for piece in layout.slices]


def place_basic(tables: TableSizes, layouts: Sequence[TableLayout], budget: Optional[int]) -> Assignment:
    """Round robin in table order: each piece to the next rank after the previous piece's that can take it."""
    assignment = Assignment(tables, layouts, budget)
    world_size = tables.world_size
    next_rank = 0
    for piece in _sharded_slices(layouts):
        eligible = {load.rank for load in assignment.eligible(piece)}
        if not eligible:
            raise assignment.no_room(piece)
        chosen = next(rank for rank in ((next_rank + i) % world_size for i in range(world_size)) if rank in eligible)
        assignment.give(piece, assignment.ranks[chosen])
        next_rank = (chosen + 1) % world_size
    return assignment


def place_memory_balanced(tables: TableSizes, layouts: Sequence[TableLayout], budget: Optional[int]) -> Assignment:
    """Whole pieces largest first, then the row-sliced tables filled to one level; the fewest extra
    tables row-sliced (largest first) that bring every rank within BALANCE_TOLERANCE of the mean.

    When no choice is that even, the most even plan that fits; when none fits, the error of the plan
    that slices the most (the one most likely to fit)."""
    best: Optional[Assignment] = None
    error: Optional[PlanError] = None
    for sliced in _row_slicing_choices(tables, layouts):
        try:
            assignment = place_then_fill(tables, sliced, budget)
        except PlanError as failed:
            error = failed
            continue
        if assignment.peak_over_mean() <= 1 + BALANCE_TOLERANCE:
            return _lookups_evened(assignment)
        if best is None or assignment.peak_over_mean() < best.peak_over_mean():
            best = assignment
    if best is None:
        assert error is not None  # every choice failed, so one raised
        raise error
    return _lookups_evened(best)


def _lookups_evened(assignment: Assignment) -> Assignment:
    """`assignment` with whole pieces moved to even out the lookup load; no rank's memory goes over
    BALANCE_TOLERANCE above the mean (or over the fullest rank's, when that is higher) nor the budget."""
    memory = [load.memory_bytes for load in assignment.ranks]
    ceiling = max(max(memory), (1 + BALANCE_TOLERANCE) * sum(memory) / len(memory))
    return even_out_lookups(assignment, ceiling if assignment.budget is None else min(ceiling, assignment.budget))


def _row_slicing_choices(tables: TableSizes, layouts: Sequence[TableLayout]) -> Iterator[List[TableLayout]]:
    """The layouts with 0, 1, 2, ... more table-wise tables row-sliced, largest first; a table above
    the tolerated share of one rank is never left whole (no choice keeping it whole can be even)."""
    whole = sorted((layout.table for layout in layouts if layout.kind == "table_wise"
                    and tables.rows(layout.table) > 1 and tables.world_size > 1),
                   key=lambda t: -tables.table_bytes(t))  # stable: table order among equal sizes
    tolerated = (1 + BALANCE_TOLERANCE) * tables.total_bytes() / tables.world_size
    first = sum(1 for t in whole if tables.table_bytes(t) > tolerated)
    for count in range(first, len(whole) + 1):
        sliced = set(whole[:count])
        yield [replace(layout, kind="row_sliced") if layout.table in sliced else layout for layout in layouts]


def place_then_fill(tables: TableSizes, layouts: Sequence[TableLayout], budget: Optional[int]) -> Assignment:
    """Whole pieces (table-wise tables, column slices) largest first, then the row-sliced tables filled
    to one level (their layout's even cut is not used: the fill decides the ranges)."""
    assignment = Assignment(tables, layouts, budget)
    whole = [layout for layout in layouts if layout.kind in ("table_wise", "column_sliced")]
    place_largest_first(assignment, _sharded_slices(whole))
    fill_row_slices(assignment, [layout.table for layout in layouts if layout.kind == "row_sliced"])
    return assignment


def place_largest_first(assignment: Assignment, pieces: Sequence[TablePiece]) -> None:
    """Largest piece first onto the rank with the lowest memory share plus lookup share."""
    tables = assignment.tables
    total_bytes = max(tables.total_bytes(), 1)
    total_lookups = max(tables.total_lookups(), 1e-9)
    # Largest first; the stable sort keeps table order among equal sizes (deterministic plans).
    for piece in sorted(pieces, key=lambda piece: -tables.piece_bytes(piece)):
        eligible = assignment.eligible(piece)
        if not eligible:
            raise assignment.no_room(piece)
        size, lookups = tables.piece_bytes(piece), tables.piece_lookups(piece)
        assignment.give(piece, _least_loaded(eligible, size, lookups, total_bytes, total_lookups))


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
    tables = assignment.tables
    budget = math.inf if assignment.budget is None else assignment.budget
    level = water_level([load.memory_bytes for load in assignment.ranks], sum(tables.table_bytes(t) for t in fluid))
    if level > budget:
        t = max(fluid, key=tables.table_bytes)
        raise PlanError(
            f"{tables.title(t)}) and the other row-sliced tables do not fit: "
            f"spreading them evenly needs {format_bytes(level)} on the fullest ranks, short by "
            f"{format_bytes(level - budget)} per rank over the budget of {format_bytes(budget)}", table=t)
    for t in sorted(fluid, key=lambda i: -tables.table_bytes(i)):
        _fill_table(assignment, t, level, budget)


def _fill_table(assignment: Assignment, table: int, level: float, budget: float) -> None:
    """Row ranges of `table` onto the emptiest ranks first, each up to `level`; the last rank takes the rest."""
    tables = assignment.tables
    row, rows, row_bytes = 0, tables.rows(table), tables.row_bytes(table)
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
        assignment.give(TablePiece(table, row, row + take, 0, tables.dim(table)), load)
        row += take
        if row == rows:
            break


def _rows_up_to_level(load: RankLoad, level: float, row_bytes: int, budget: float) -> int:
    """Rows that fill `load` up to `level`, rounded up (at most one row over the level, so no sliver is
    left for the next rank); rounded down only where rounding up would break the budget."""
    room = max(0.0, level - load.memory_bytes)
    room_rows = math.ceil(room / row_bytes)
    if load.memory_bytes + room_rows * row_bytes > budget:
        room_rows = int(room // row_bytes)
    return room_rows


Strategy = Callable[[TableSizes, Sequence[TableLayout], Optional[int]], Assignment]
STRATEGY_FUNCTIONS: Dict[str, Strategy] = {"basic": place_basic, "memory_balanced": place_memory_balanced}
STRATEGIES = tuple(STRATEGY_FUNCTIONS)


def check_strategy(name: str) -> Strategy:
    """The placement function called `name`; ValueError naming the choices otherwise."""
    return named_choice(STRATEGY_FUNCTIONS, name, "sharding strategy")


def place(tables: TableSizes, cfg: ShardingConfig) -> Plan:
    """One placement attempt within `cfg`'s budget: PlanError when some piece finds no rank."""
    strategy = check_strategy(cfg.strategy)
    return strategy(tables, lay_out(tables, cfg), cfg.rank_memory_bytes).plan(cfg.strategy)
