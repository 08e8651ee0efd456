"""Per-feature dictionaries: count categorical values over the dictionary days, threshold, number them.

Rule: a value seen `count >= T` times (T per feature; T=0 keeps everything) gets an id in 1..n, in
descending count order, ties broken by ascending value (the hash read as an unsigned hex number).
Id 0 is shared by missing, unseen and below-threshold values, so a table has n+1 rows.
"""
from __future__ import annotations

import numpy as np

from preproc_spark3.config import CATEGORICAL_COLUMNS

COUNTS_SCHEMA = "feature int, value long, count long"


class ValueCounter:
    """Counts of the categorical values of one parse task's rows (a Spark-free part of the dictionary):
    per batch a sort-based count per feature, merged once at the end, so only (feature, value, count)
    rows - far fewer than rows x features - leave the task."""

    def __init__(self, days: tuple[int, ...]):
        self.days = days
        self.parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {i: [] for i in range(len(CATEGORICAL_COLUMNS))}

    def add(self, parsed) -> None:
        """parsed: an Arrow batch of the parse (day, reason, C1..C26); well-formed rows of `days` count."""
        import pyarrow as pa
        import pyarrow.compute as pc

        in_days = pc.is_in(parsed.column("day"), pa.array(self.days, pa.int32()))
        keep = pc.and_(pc.is_null(parsed.column("reason")), in_days)
        for index, name in enumerate(CATEGORICAL_COLUMNS):
            values = pc.drop_null(pc.filter(parsed.column(name), keep)).to_numpy(zero_copy_only=False)
            if len(values):
                self.parts[index].append(np.unique(values, return_counts=True))

    def table(self):
        """The merged counts as an Arrow table (COUNTS_SCHEMA)."""
        import pyarrow as pa

        features, values, counts = [], [], []
        for index, parts in self.parts.items():
            if not parts:
                continue
            unique, inverse = np.unique(np.concatenate([v for v, _ in parts]), return_inverse=True)
            features.append(np.full(len(unique), index, dtype=np.int32))
            values.append(unique.astype(np.int64))
            counts.append(np.bincount(inverse, weights=np.concatenate([c for _, c in parts]),
                                      minlength=len(unique)).astype(np.int64))

        def joined(arrays, dtype):
            return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
        return pa.table({"feature": joined(features, np.int32), "value": joined(values, np.int64),
                         "count": joined(counts, np.int64)})


def build_dictionary(counts, thresholds: tuple[int, ...]):
    """counts: DataFrame[COUNTS_SCHEMA], partial counts of the dictionary days' well-formed rows (see
    ValueCounter) -> DataFrame[feature, value, count, id].

    These are the parquet columns of <out_dir>/dictionary; feature is the 0-based index (C1 = 0).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    totals = counts.groupBy("feature", "value").agg(F.sum("count").cast("long").alias("count"))
    threshold = F.element_at(F.array(*[F.lit(int(t)) for t in thresholds]), F.col("feature") + 1)
    kept = totals.filter(F.col("count") >= threshold)
    order = Window.partitionBy("feature").orderBy(F.col("count").desc(), F.col("value").asc())
    ids = F.row_number().over(order).cast("int").alias("id")
    return kept.select(F.col("feature").cast("int"), "value", "count", ids)


def cardinalities(dictionary) -> list[int]:
    """Table sizes n+1 (id 0 included), in CATEGORICAL_COLUMNS order; a feature with no kept value has 1."""
    from pyspark.sql import functions as F

    sizes = {row["feature"]: row["n"] for row in dictionary.groupBy("feature").agg(F.max("id").alias("n")).collect()}
    return [sizes.get(i, 0) + 1 for i in range(len(CATEGORICAL_COLUMNS))]


VALUE_OFFSET = 1 << 31  # categorical values (0 .. 2^32-1) travel as int32: value - 2^31


class IdLookup:
    """value -> id for the dictionaries small enough to ship to every task: per feature, its kept values
    sorted ascending and their ids, looked up with a binary search (missing and unseen values -> 0)."""

    def __init__(self, tables: dict[int, tuple[np.ndarray, np.ndarray]]):
        self.tables = tables  # feature index -> (sorted int64 values, int32 ids)

    @classmethod
    def read(cls, dictionary_dir: str, features: list[int]) -> IdLookup:
        """From the dictionary parquet files (feature, value, count, id), for `features` only."""
        import pyarrow.parquet as pq

        table = pq.read_table(dictionary_dir, columns=["feature", "value", "id"])
        feature = table.column("feature").to_numpy()
        value = table.column("value").to_numpy()
        ids = table.column("id").to_numpy().astype(np.int32)
        tables = {}
        for index in features:
            rows = np.flatnonzero(feature == index)
            order = np.argsort(value[rows], kind="stable")
            tables[index] = (value[rows][order].astype(np.int64), ids[rows][order])
        return cls(tables)

    def ids(self, feature: int, shifted) -> np.ndarray:
        """Arrow int32 column of `value - VALUE_OFFSET` (null when missing) -> int32 ids."""
        import pyarrow.compute as pc

        values, ids = self.tables[feature]
        query = pc.fill_null(shifted, 0).to_numpy(zero_copy_only=False).astype(np.int64) + VALUE_OFFSET
        found = np.zeros(len(query), dtype=np.int32)
        if len(values):
            position = np.minimum(np.searchsorted(values, query), len(values) - 1)
            hit = values[position] == query
            if shifted.null_count:
                hit &= shifted.is_valid().to_numpy(zero_copy_only=False)
            found[hit] = ids[position[hit]]
        return found
