"""The one rectangle type for a piece of an embedding table (pure Python: the planner uses it too)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class TablePiece:
    """A rectangle of table `table`: rows [row_start, row_end) x columns [col_start, col_end)."""

    table: int
    row_start: int
    row_end: int
    col_start: int
    col_end: int

    @property
    def shape(self) -> Tuple[int, int]:
        return (self.row_end - self.row_start, self.col_end - self.col_start)
