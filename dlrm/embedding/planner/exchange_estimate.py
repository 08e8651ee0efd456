"""Bytes the hybrid-parallel exchange moves per training step and rank: a pure-Python estimate from a plan.

The model is the sharded lookup's design. For every sharded piece (a table-wise table, a column slice or a
row slice) every rank sends the piece's owner the ids of its local rows for that table (B_local x hotness
int32; a row slice receives all of them, ids outside its rows as -1) and receives one pooled vector per row
back (B_local x width float32; a row slice's vector is a partial sum, and a mean divides by the count the
requester takes from its own ids, so no count travels). The backward pass sends the gradient of those
vectors to the owners (B_local x width float32). What a rank would send itself is a local copy and is not
counted. Ids are counted before any deduplication (an upper bound where the exchange deduplicates).

Replicated tables are looked up locally and exchange nothing by all-to-all; their sparse gradients (one row
of dim float32 and one int64 index per looked-up id) are allgathered, estimated apart: a rank receives the
other ranks' rows, (B_global - B_local) x hotness x (dim x 4 + 8) bytes per step.

Per rank, a phase's figure is the larger of the bytes it sends and receives: on a full-duplex link that
direction sets the time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from dlrm.embedding.planner.layout import even_ranges
from dlrm.embedding.planner.plan import Plan, TablePlacement

ID_BYTES = 4  # int32 ids
VALUE_BYTES = 4  # float32 pooled values and gradients
INDEX_BYTES = 8  # int64 row index of a replicated table's sparse gradient


@dataclass(frozen=True)
class RankTraffic:
    """One rank's all-to-all bytes in one step (to and from the other ranks)."""

    rank: int
    local_batch: int
    forward_sent: int
    forward_received: int
    backward_sent: int
    backward_received: int

    @property
    def forward_bytes(self) -> int:
        return max(self.forward_sent, self.forward_received)

    @property
    def backward_bytes(self) -> int:
        return max(self.backward_sent, self.backward_received)


@dataclass(frozen=True)
class ExchangeEstimate:
    """The all-to-all bytes of every rank for one step, and the replicated tables' allgather bytes per rank."""

    global_batch: int
    ranks: Tuple[RankTraffic, ...]
    replicated_allgather_bytes: int

    def summary(self) -> Dict[str, float]:
        forward = [r.forward_bytes for r in self.ranks]
        backward = [r.backward_bytes for r in self.ranks]
        return {"forward_max_bytes": max(forward), "forward_mean_bytes": sum(forward) / len(forward),
                "backward_max_bytes": max(backward), "backward_mean_bytes": sum(backward) / len(backward),
                "replicated_allgather_bytes": self.replicated_allgather_bytes}


@dataclass(frozen=True)
class _PieceRow:
    """Bytes one batch row costs between a requester and a piece's owner."""

    ids: int  # requester -> owner, forward
    vectors: int  # owner -> requester, forward
    gradients: int  # requester -> owner, backward

    def __add__(self, other: "_PieceRow") -> "_PieceRow":
        return _PieceRow(self.ids + other.ids, self.vectors + other.vectors, self.gradients + other.gradients)


_NOTHING = _PieceRow(0, 0, 0)


def _piece_row(placement: TablePlacement, width: int) -> _PieceRow:
    return _PieceRow(placement.hotness * ID_BYTES, width * VALUE_BYTES, width * VALUE_BYTES)


def exchange_bytes(plan: Plan, global_batch: int) -> ExchangeEstimate:
    """Every rank's all-to-all bytes for one step of `global_batch` rows, split over the ranks as the
    reader splits a batch (the first `global_batch % world_size` ranks take one row more)."""
    if global_batch < 0:
        raise ValueError(f"the global batch must be >= 0, got {global_batch}")
    owned: List[_PieceRow] = [_NOTHING] * plan.world_size
    for placement in plan.tables:
        if placement.kind == "replicated":
            continue
        for rank, piece in placement.pieces:
            owned[rank] = owned[rank] + _piece_row(placement, piece.col_end - piece.col_start)
    every = sum(owned, _NOTHING)
    ranks = []
    for rank, (start, end) in enumerate(even_ranges(global_batch, plan.world_size)):
        local, others, mine = end - start, global_batch - (end - start), owned[rank]
        ranks.append(RankTraffic(
            rank=rank, local_batch=local,
            forward_sent=local * (every.ids - mine.ids) + others * mine.vectors,
            forward_received=others * mine.ids + local * (every.vectors - mine.vectors),
            backward_sent=local * (every.gradients - mine.gradients),
            backward_received=others * mine.gradients))
    smallest_local = min(rank.local_batch for rank in ranks)
    return ExchangeEstimate(global_batch, tuple(ranks), replicated_allgather_bytes(plan, global_batch - smallest_local))


def replicated_allgather_bytes(plan: Plan, other_rows: int) -> int:
    """Bytes a rank receives per step when the replicated tables' sparse gradients of `other_rows` batch rows
    (those of the other ranks) are allgathered: one gradient row and one index per looked-up id."""
    if plan.world_size == 1:
        return 0
    per_row = sum(p.hotness * (p.dim * VALUE_BYTES + INDEX_BYTES) for p in plan.tables if p.kind == "replicated")
    return other_rows * per_row
