"""Per-feature dictionaries: count categorical values over the dictionary days, threshold, number them.

Rule: a value seen `count >= T` times (T per feature; T=0 keeps everything) gets an id in 1..n, in
descending count order, ties broken by ascending value (the hash read as an unsigned hex number).
Id 0 is shared by missing, unseen and below-threshold values, so a table has n+1 rows.

The parse tasks count their rows' values (ValueCounter); one reduce task per feature sums the parts,
numbers the kept values (`build_feature`) and writes them twice: `<out>/dictionary` parquet
(feature, value, count, id; C1 is feature 0) for readers, and the kept values sorted with their ids as
.npy files for the chunk writers, which memory-map them (IdLookup) instead of receiving a copy each.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from preproc_spark3.config import CATEGORICAL_COLUMNS


def merge_counts(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(values, counts) parts -> distinct values ascending and their summed counts."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if len(parts) == 1:
        return parts[0][0].astype(np.int64), parts[0][1].astype(np.int64)
    unique, inverse = np.unique(np.concatenate([v for v, _ in parts]), return_inverse=True)
    counts = np.bincount(inverse, weights=np.concatenate([c for _, c in parts]), minlength=len(unique))
    return unique.astype(np.int64), np.rint(counts).astype(np.int64)


class ValueCounter:
    """Counts of the categorical values of one parse task's rows: per block a sort-based count per
    feature, merged once at the end, so only distinct (value, count) pairs leave the task."""

    def __init__(self) -> None:
        self.parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in CATEGORICAL_COLUMNS]

    def add(self, categorical: np.ndarray) -> None:
        """categorical: int64 [n, 26] values of rows that count (negative = missing)."""
        for index in range(categorical.shape[1]):
            values = categorical[:, index]
            values = values[values >= 0]
            if len(values):
                self.parts[index].append(np.unique(values, return_counts=True))

    def counts(self, feature: int) -> tuple[np.ndarray, np.ndarray]:
        """This task's (distinct values ascending, counts) of one feature."""
        return merge_counts(self.parts[feature])


@dataclass
class FeatureDictionary:
    """One feature's kept values sorted ascending, with their counts and ids."""

    values: np.ndarray  # int64
    counts: np.ndarray  # int64
    ids: np.ndarray  # int32

    @property
    def cardinality(self) -> int:
        """Table size n+1 (id 0 included)."""
        return len(self.values) + 1


def build_feature(parts: list[tuple[np.ndarray, np.ndarray]], threshold: int) -> FeatureDictionary:
    """Partial counts of one feature -> its dictionary (threshold, ids by descending count then value)."""
    values, counts = merge_counts(parts)
    keep = counts >= threshold
    values, counts = values[keep], counts[keep]
    rank = np.lexsort((values, -counts))  # positions in id order
    ids = np.empty(len(values), dtype=np.int32)
    ids[rank] = np.arange(1, len(values) + 1, dtype=np.int32)
    return FeatureDictionary(values, counts, ids)


def one_row_warnings(cardinalities: list[int], thresholds: tuple[int, ...], names: tuple[str, ...]) -> list[str]:
    """A warning per feature whose table has one row: every value of it was missing or below its frequency
    threshold, so every row gets id 0 and the feature tells the model nothing."""
    warnings = []
    for name, cardinality, threshold in zip(names, cardinalities, thresholds):
        if cardinality == 1:
            below = threshold > 1  # thresholds 0 and 1 keep every value seen
            cause = f"seen fewer than {threshold} times (its --frequency_threshold)" if below else \
                "missing from the days the dictionary counts"
            advice = f"; lower its threshold with an override in --frequency_threshold (e.g. {name}:1)"
            warnings.append(f"feature {name}: every value is {cause}, so its table has 1 row and the feature "
                            f"carries no information" + (advice if below else ""))
    return warnings


def lookup_paths(directory: str, feature: int) -> tuple[str, str]:
    return (os.path.join(directory, f"values_{feature:02d}.npy"), os.path.join(directory, f"ids_{feature:02d}.npy"))


def write_feature(dictionary: FeatureDictionary, feature: int, parquet_dir: str, lookup_dir: str) -> None:
    """The feature's parquet part (rows in id order) and its lookup arrays."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    order = np.argsort(dictionary.ids, kind="stable")
    n = len(order)
    pq.write_table(pa.table({"feature": pa.array(np.full(n, feature, dtype=np.int32)),
                             "value": pa.array(dictionary.values[order]),
                             "count": pa.array(dictionary.counts[order]), "id": pa.array(dictionary.ids[order])}),
                   os.path.join(parquet_dir, f"part-{feature:05d}.parquet"), compression="snappy")
    values_path, ids_path = lookup_paths(lookup_dir, feature)
    np.save(values_path, dictionary.values)
    np.save(ids_path, dictionary.ids)


_SMALL_TABLE = 4096  # kept values up to which an unsorted binary search is as fast


class IdLookup:
    """value -> id per feature: its kept values sorted ascending and their ids, looked up with a binary
    search (missing and unseen values -> 0)."""

    def __init__(self, tables: dict[int, tuple[np.ndarray, np.ndarray]]):
        self.tables = tables  # feature index -> (sorted int64 values, int32 ids)

    @classmethod
    def open(cls, lookup_dir: str, features: int = len(CATEGORICAL_COLUMNS)) -> IdLookup:
        """The arrays `write_feature` wrote, memory-mapped (shared by the tasks through the page cache)."""
        tables = {}
        for index in range(features):
            values_path, ids_path = lookup_paths(lookup_dir, index)
            tables[index] = (np.load(values_path, mmap_mode="r"), np.load(ids_path, mmap_mode="r"))
        return cls(tables)

    def ids(self, feature: int, values: np.ndarray) -> np.ndarray:
        """int64 raw values (negative = missing) -> int32 ids."""
        return lookup_ids(*self.tables[feature], values)


def lookup_ids(kept: np.ndarray, ids: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Ids of int64 `values` in one feature's kept values (sorted ascending) and their ids; missing
    (negative), unseen and below-threshold values -> 0."""
    found = np.zeros(len(values), dtype=np.int32)
    if not len(kept):
        return found
    if len(kept) > _SMALL_TABLE:  # sorted queries keep the binary search in cache: ~3x faster here
        order = np.argsort(values)
        position = np.empty(len(values), dtype=np.intp)
        position[order] = np.searchsorted(kept, values[order])
    else:
        position = np.searchsorted(kept, values)
    position = np.minimum(position, len(kept) - 1)
    hit = kept[position] == values
    found[hit] = ids[position[hit]]
    return found
