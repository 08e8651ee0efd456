"""Evening out the lookup load once memory is placed: whole pieces move or swap off the busiest rank.

A rank's sparse work in a step (the ids it receives, the gather and pooling, the gradient's scatter) grows
with its lookup load (hotness x columns per sample), not with its memory. With multi-hot tables of very
different hotness, a plan that is even in memory can leave one rank with far more sparse work than the
others, and every other rank waits for it in the all-to-all. Only whole pieces move (table-wise tables,
column slices, and a row-sliced table the fill left whole); row slices stay where the fill put them, and
no rank's memory goes over the ceiling the caller gives.
"""
from __future__ import annotations

import copy
from typing import Iterator, List, NamedTuple, Optional

from dlrm.embedding.pieces import TablePiece
from dlrm.embedding.planner.assignment import Assignment
from dlrm.embedding.planner.plan import RankLoad

MOVABLE_KINDS = ("table_wise", "column_sliced")
# The moves are kept only if they lower the peak lookup load by this fraction: the load is an estimate (ids
# assumed uniform over rows), and a smaller gain is not worth the memory evenness it costs.
MIN_GAIN = 0.01


class Exchange(NamedTuple):
    """`piece` leaves the busiest rank for `other`; `returned` (if any) goes the other way."""

    peak: float  # the larger lookup load of the two ranks afterwards
    memory_peak: int  # the larger memory of the two ranks afterwards
    piece: TablePiece
    other: RankLoad
    returned: Optional[TablePiece]


def even_out_lookups(assignment: Assignment, memory_ceiling: float) -> Assignment:
    """A copy of `assignment` with the busiest rank's lookups moved off while that helps, if that lowers
    the peak lookup load by MIN_GAIN or more; `assignment` itself otherwise."""
    evened = copy.deepcopy(assignment)
    _descend(evened, memory_ceiling)
    return evened if _peak(evened) <= (1 - MIN_GAIN) * _peak(assignment) else assignment


def _peak(assignment: Assignment) -> float:
    return max(load.lookup_load for load in assignment.ranks)


def _descend(assignment: Assignment, memory_ceiling: float) -> None:
    """Apply the best move or swap off the busiest rank (lowest lookup peak of the two ranks afterwards, then
    lowest memory peak) while one lowers that rank's load; each step lowers the sum of squared loads, so
    this ends."""
    while True:
        busiest = max(assignment.ranks, key=lambda load: (load.lookup_load, -load.rank))
        best = min(_exchanges(assignment, busiest, memory_ceiling), default=None,
                   key=lambda exchange: (exchange.peak, exchange.memory_peak))
        if best is None or best.peak >= busiest.lookup_load * (1 - 1e-9):
            return
        assignment.move(best.piece, busiest, best.other)
        if best.returned is not None:
            assignment.move(best.returned, best.other, busiest)


def _exchanges(assignment: Assignment, busiest: RankLoad, ceiling: float) -> Iterator[Exchange]:
    """Every move of a movable piece off `busiest`, and every swap with a lighter movable piece, that keeps
    both ranks within `ceiling` and no table twice on a rank."""
    tables = assignment.tables
    movable = _movable(assignment)
    for piece in movable[busiest.rank]:
        size, lookups = tables.piece_bytes(piece), tables.piece_lookups(piece)
        for other in assignment.ranks:
            if other is busiest or piece.table in other.tables:
                continue
            if other.memory_bytes + size <= ceiling:
                yield Exchange(max(busiest.lookup_load - lookups, other.lookup_load + lookups),
                               max(busiest.memory_bytes - size, other.memory_bytes + size), piece, other, None)
            for returned in movable[other.rank]:
                back_size, back_lookups = tables.piece_bytes(returned), tables.piece_lookups(returned)
                if (back_lookups >= lookups or returned.table in busiest.tables
                        or other.memory_bytes + size - back_size > ceiling
                        or busiest.memory_bytes - size + back_size > ceiling):
                    continue
                shift, growth = lookups - back_lookups, size - back_size
                yield Exchange(max(busiest.lookup_load - shift, other.lookup_load + shift),
                               max(busiest.memory_bytes - growth, other.memory_bytes + growth), piece, other, returned)


def _movable(assignment: Assignment) -> List[List[TablePiece]]:
    """Every rank's movable pieces, in table order."""
    pieces: List[List[TablePiece]] = [[] for _ in assignment.ranks]
    for placement in assignment.placements:
        if placement.kind in MOVABLE_KINDS or (placement.kind == "row_sliced" and len(placement.pieces) == 1):
            for owned in placement.pieces:
                pieces[owned.rank].append(owned.piece)
    return pieces
