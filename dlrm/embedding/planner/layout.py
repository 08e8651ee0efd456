"""Layout, the planner's first stage: the checked tables (each its own rows, dim and hotness), and for every
table its kind and how it is cut.

Kinds (the strategy then gives every piece a rank):
- ``replicated``    small tables (bytes <= replicate threshold): a full copy on every rank;
- ``row_sliced``    tables bigger than one rank's memory budget: contiguous row ranges on distinct ranks
                    (the ``memory_balanced`` strategy also cuts tables that would leave the ranks uneven);
- ``column_sliced`` tables above the column-slice threshold: column ranges on distinct ranks;
- ``table_wise``    everything else: the whole table on one rank.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from dlrm.config import ShardingConfig
from dlrm.embedding.pieces import TablePiece
from dlrm.embedding.planner.plan import PlanError
from dlrm.features import TableConfig, table_problems
from dlrm.sizes import format_bytes


@dataclass(frozen=True)
class TableSizes:
    """The tables to place and the cluster, checked; every size the later stages need derives from here."""

    configs: Tuple[TableConfig, ...]
    world_size: int
    bytes_per_element: int
    optimizer_slots: int

    @property
    def count(self) -> int:
        return len(self.configs)

    def rows(self, table: int) -> int:
        return self.configs[table].rows

    def dim(self, table: int) -> int:
        return self.configs[table].dim

    def hotness(self, table: int) -> int:
        return self.configs[table].hotness

    @property
    def element_bytes(self) -> int:
        """Bytes per embedding element: the weight and its optimizer slots."""
        return self.bytes_per_element * (1 + self.optimizer_slots)

    def row_bytes(self, table: int) -> int:
        return self.dim(table) * self.element_bytes

    def table_bytes(self, table: int) -> int:
        return self.rows(table) * self.row_bytes(table)

    def total_bytes(self) -> int:
        return sum(self.table_bytes(t) for t in range(self.count))

    def total_lookups(self) -> float:
        """Elements fetched per global sample over all tables (hotness x dim)."""
        return float(sum(c.hotness * c.dim for c in self.configs))

    def piece_bytes(self, piece: TablePiece) -> int:
        rows, cols = piece.shape
        return rows * cols * self.element_bytes

    def piece_lookups(self, piece: TablePiece) -> float:
        """Elements fetched from `piece` per global sample, assuming ids spread uniformly over the rows."""
        rows, cols = piece.shape
        return self.hotness(piece.table) * cols * rows / self.rows(piece.table)

    def whole(self, table: int) -> TablePiece:
        return TablePiece(table, 0, self.rows(table), 0, self.dim(table))

    def title(self, table: int) -> str:
        """How messages name a table: "table 'cat_3' (1,000 rows x 8 cols" (the caller closes the bracket)."""
        return f"table {self.configs[table].name!r} ({self.rows(table):,} rows x {self.dim(table)} cols"


def check_tables(tables: Sequence[TableConfig], world_size: int, bytes_per_element: int,
                 optimizer_slots: int) -> TableSizes:
    """`TableSizes` from the caller's figures; PlanError for sizes no plan can have."""
    if world_size < 1:
        raise PlanError(f"world_size must be positive (got {world_size})")
    configs = tuple(tables)
    problems = table_problems(configs)
    if problems:
        raise PlanError("; ".join(problems))
    return TableSizes(configs, world_size, bytes_per_element, optimizer_slots)


@dataclass(frozen=True)
class TableLayout:
    """A table's kind and its cut: even row ranges, even column ranges, or the whole table."""

    table: int
    kind: str
    slices: List[TablePiece]


def lay_out(tables: TableSizes, cfg: ShardingConfig) -> List[TableLayout]:
    """Every table's layout, in table order; PlanError for a table too big even when cut over all ranks."""
    layouts = []
    for t in range(tables.count):
        kind, count = _kind_and_slice_count(tables, t, cfg)
        layouts.append(TableLayout(t, kind, _cut(kind, t, tables.rows(t), tables.dim(t), count)))
    return layouts


def _kind_and_slice_count(tables: TableSizes, table: int, cfg: ShardingConfig) -> Tuple[str, int]:
    size, budget, threshold = tables.table_bytes(table), cfg.rank_memory_bytes, cfg.column_slice_threshold_bytes
    if tables.world_size == 1:
        return "table_wise", 1
    if budget is not None and size > budget:
        return "row_sliced", max(2, min(_row_slices_needed(tables, table, budget), tables.rows(table)))
    if threshold is not None and size > threshold:
        return "column_sliced", max(2, min(math.ceil(size / threshold), tables.world_size, tables.dim(table)))
    if size <= cfg.replicate_threshold_bytes:
        return "replicated", 1
    return "table_wise", 1


def _row_slices_needed(tables: TableSizes, table: int, budget: int) -> int:
    """Fewest row slices that fit the budget; an error naming the table when the world is too small."""
    size, world_size = tables.table_bytes(table), tables.world_size
    needed = math.ceil(size / budget)
    if needed > world_size:
        short = size / world_size - budget
        raise PlanError(
            f"{tables.title(table)}, {format_bytes(size)}) does not fit: "
            f"even split over all {world_size} ranks needs {format_bytes(size / world_size)} "
            f"per rank, {format_bytes(short)} more than the budget of {format_bytes(budget)}", table=table)
    return needed


def _cut(kind: str, table: int, rows: int, dim: int, count: int) -> List[TablePiece]:
    if kind == "row_sliced":
        return [TablePiece(table, start, end, 0, dim) for start, end in even_ranges(rows, count)]
    if kind == "column_sliced":
        return [TablePiece(table, 0, rows, start, end) for start, end in even_ranges(dim, count)]
    return [TablePiece(table, 0, rows, 0, dim)]


def even_ranges(total: int, parts: int) -> List[Tuple[int, int]]:
    """Split [0, total) into `parts` contiguous ranges whose lengths differ by at most one."""
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges
