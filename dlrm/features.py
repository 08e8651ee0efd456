"""The feature contract: what a dataset's rows hold, as every part of the trainer sees it.

Built once from the feature spec (`dlrm.data.format.contract.contract_from_spec`) and handed to the planner,
the embedding layer, the model and checkpoints; nothing else decides the data's shape. Pure Python.

A batch carries the categorical ids of all tables side by side in one int32 array
[B, total_hotness]: table t occupies columns `id_columns(t)`, one column for a one-hot feature and
`hotness` columns for a multi-hot one, padded with -1 after its last id. The embedding layer returns
one pooled vector per (row, table), concatenated in table order: [B, total_dim], table t at
`vector_columns(t)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

COMBINERS = ("sum", "mean")
PADDING_ID = -1
# How a table's weights start (`dlrm.embedding.local.initial_table_values`): "uniform" in
# [-sqrt(1/rows), sqrt(1/rows)) (reference DLRM), "glorot_normal" (Keras' truncated form, Wide & Deep's
# deep tables) or "zeros" (Wide & Deep's wide tables).
INITIALIZERS = ("uniform", "glorot_normal", "zeros")


@dataclass(frozen=True)
class TableConfig:
    """One categorical feature and its embedding table.

    `hotness`: ids per row (1 for one-hot; `max_hotness` for multi-hot, padded with -1).
    `multi_hot`: the feature is a bag (pooled with `combiner`), even if its hotness is 1.
    `initializer`: one of INITIALIZERS; the model decides it (`dlrm.model_tables.model_tables`), not the data.
    It says how a table starts, not what it is: tables that differ only in it compare equal (a model built to
    be restored from a checkpoint starts its tables as zeros, `train.build.build_embeddings`).
    """

    name: str
    rows: int
    dim: int
    hotness: int = 1
    combiner: str = "sum"
    multi_hot: bool = False
    initializer: str = field(default="uniform", compare=False)

    def problems(self) -> List[str]:
        """Why this table cannot be built (empty if it can)."""
        found = []
        if self.rows < 1:
            found.append(f"feature {self.name!r}: the table needs at least one row (cardinality {self.rows})")
        if self.dim < 1:
            found.append(f"feature {self.name!r}: the embedding dim must be >= 1, got {self.dim}")
        if self.hotness < 1:
            found.append(f"feature {self.name!r}: max_hotness must be >= 1, got {self.hotness}")
        if not self.multi_hot and self.hotness != 1:
            found.append(f"feature {self.name!r}: a one-hot feature has hotness 1, got {self.hotness}")
        if self.combiner not in COMBINERS:
            found.append(f"feature {self.name!r}: combiner must be one of {COMBINERS}, got {self.combiner!r}")
        if self.initializer not in INITIALIZERS:
            found.append(f"table {self.name!r}: initializer must be one of {INITIALIZERS}, got {self.initializer!r}")
        return found


@dataclass(frozen=True)
class FeatureContract:
    """Label, numerical features, categorical tables (in id-column order) and the optional group channel."""

    label: str
    numerical: Tuple[str, ...]
    tables: Tuple[TableConfig, ...]
    group: Optional[str] = None  # per-row group id (e.g. a display id) for ranking metrics

    @property
    def num_numerical(self) -> int:
        return len(self.numerical)

    @property
    def num_tables(self) -> int:
        return len(self.tables)

    @property
    def table_names(self) -> List[str]:
        return [t.name for t in self.tables]

    @property
    def total_hotness(self) -> int:
        return total_hotness(self.tables)

    @property
    def total_dim(self) -> int:
        return total_dim(self.tables)

    def id_columns(self, table: int) -> Tuple[int, int]:
        """[start, end) of table `table`'s ids in a batch's categorical array."""
        return _span(self.tables, table, lambda t: t.hotness)

    def vector_columns(self, table: int) -> Tuple[int, int]:
        """[start, end) of table `table`'s pooled vector in the embedding output."""
        return _span(self.tables, table, lambda t: t.dim)

    def index(self, name: str) -> int:
        for i, table in enumerate(self.tables):
            if table.name == name:
                return i
        raise KeyError(f"no categorical feature named {name!r} (have {self.table_names})")

    def problems(self) -> List[str]:
        return table_problems(self.tables)


def table_problems(tables: Sequence[TableConfig]) -> List[str]:
    """Why these tables cannot be built together (empty if they can): each table's rules, unique names."""
    found = [problem for table in tables for problem in table.problems()]
    names = [table.name for table in tables]
    found += [f"categorical feature {name!r} appears twice" for name in sorted(set(names)) if names.count(name) > 1]
    return found


def total_hotness(tables: Sequence[TableConfig]) -> int:
    """Width of a batch's categorical id array: the tables' ids side by side."""
    return sum(t.hotness for t in tables)


def total_dim(tables: Sequence[TableConfig]) -> int:
    """Width of the embedding layer's output: the tables' pooled vectors side by side."""
    return sum(t.dim for t in tables)


def _span(tables: Sequence[TableConfig], index: int, width) -> Tuple[int, int]:
    start = sum(width(t) for t in tables[:index])
    return start, start + width(tables[index])


def one_hot_tables(rows: Sequence[int], dim: int, names: Optional[Sequence[str]] = None) -> Tuple[TableConfig, ...]:
    """One-hot tables of one dim, named `cat_<i>` unless names are given (Criteo's shape)."""
    names = list(names) if names is not None else [f"cat_{i}" for i in range(len(rows))]
    return tuple(TableConfig(name, int(r), int(dim)) for name, r in zip(names, rows))
