"""What the planner decides: every table's layout and owned pieces, every rank's load, and the JSON
form of both (broadcast to the ranks and stored in checkpoints' meta.json)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import List, NamedTuple, Optional

from dlrm.embedding.pieces import TablePiece
from dlrm.errors import UserError


class PlanError(UserError, ValueError):
    """The tables cannot be placed on this cluster (the message names the table and the shortfall).

    Every rank plans alike, so rank 0 alone reports it. `minimum_rank_memory`: the smallest per-rank
    budget at which the plan succeeds (None when not known). `replicas`: the replicated tables alone
    overflow the budget (more ranks do not help there).
    """

    on_every_rank = True

    def __init__(self, message: str, table: Optional[int] = None, replicas: bool = False):
        super().__init__(message)
        self.table = table
        self.replicas = replicas
        self.minimum_rank_memory: Optional[int] = None


class OwnedPiece(NamedTuple):
    """A piece of a table and the rank that holds it."""

    rank: int
    piece: TablePiece


@dataclass
class TablePlacement:
    """One table's layout and owned pieces, with what the exchange estimate needs (dim, hotness, combiner)."""

    table: int  # index in contract order
    name: str
    rows: int
    dim: int
    kind: str  # replicated, row_sliced, column_sliced or table_wise
    pieces: List[OwnedPiece]
    hotness: int = 1
    combiner: str = "sum"

    @property
    def lookups_per_sample(self) -> float:
        """Ids looked up per sample: the table's hotness."""
        return float(self.hotness)

    def to_dict(self) -> dict:
        return {"table": self.table, "name": self.name, "rows": self.rows, "dim": self.dim, "kind": self.kind,
                "pieces": [_owned_piece_to_dict(owned) for owned in self.pieces],
                "hotness": self.hotness, "combiner": self.combiner}

    @classmethod
    def from_dict(cls, data: dict, dim: Optional[int] = None) -> "TablePlacement":
        """`dim`: the plan-wide dim of a plan saved before tables had their own (tables then named `cat_<i>`)."""
        table = data["table"]
        return cls(table=table, name=data.get("name", f"cat_{table}"), rows=data["rows"],
                   dim=data.get("dim", dim), kind=data["kind"],
                   pieces=[_owned_piece_from_dict(table, p) for p in data["pieces"]],
                   hotness=int(data.get("hotness", round(data.get("lookups_per_sample", 1)))),
                   combiner=data.get("combiner", "sum"))


def _owned_piece_to_dict(owned: OwnedPiece) -> dict:
    """The JSON form of a piece: its table is the enclosing placement's."""
    piece = owned.piece
    return {"rank": owned.rank, "row_start": piece.row_start, "row_end": piece.row_end,
            "col_start": piece.col_start, "col_end": piece.col_end}


def _owned_piece_from_dict(table: int, data: dict) -> OwnedPiece:
    piece = TablePiece(table, data["row_start"], data["row_end"], data["col_start"], data["col_end"])
    return OwnedPiece(data["rank"], piece)


@dataclass
class RankLoad:
    rank: int
    memory_bytes: int = 0
    lookup_load: float = 0.0  # embedding elements gathered per global sample
    tables: List[int] = field(default_factory=list)


@dataclass
class Plan:
    world_size: int
    strategy: str
    bytes_per_element: int
    optimizer_slots: int
    tables: List[TablePlacement]
    ranks: List[RankLoad]

    # -- queries used by the distributed layer and checkpoints ---------------------------------
    def pieces_on_rank(self, rank: int) -> List[TablePiece]:
        """Pieces held by `rank`, in table order (replicated tables included)."""
        return [owned.piece for t in self.tables for owned in t.pieces if owned.rank == rank]

    @property
    def total_memory_bytes(self) -> int:
        return sum(r.memory_bytes for r in self.ranks)

    def memory_spread(self) -> dict:
        mem = [r.memory_bytes for r in self.ranks]
        mean = sum(mem) / len(mem)
        return {"min_bytes": min(mem), "max_bytes": max(mem), "mean_bytes": mean,
                "max_over_mean": (max(mem) / mean) if mean else 1.0}

    # -- JSON round trip (checkpoints store the plan in meta.json) -----------------------------
    def to_dict(self) -> dict:
        return {"world_size": self.world_size, "strategy": self.strategy,
                "bytes_per_element": self.bytes_per_element, "optimizer_slots": self.optimizer_slots,
                "tables": [t.to_dict() for t in self.tables], "ranks": [asdict(r) for r in self.ranks]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        """A plan from its JSON form; plans saved with one top-level `dim` for all tables read too."""
        return cls(world_size=data["world_size"], strategy=data["strategy"],
                   bytes_per_element=data["bytes_per_element"], optimizer_slots=data["optimizer_slots"],
                   tables=[TablePlacement.from_dict(t, data.get("dim")) for t in data["tables"]],
                   ranks=[RankLoad(**r) for r in data["ranks"]])
