"""Stream the parquet splits into the data layer's split-binary format (bounded memory).

Reads each split's part files in part-number order, `batch_rows` rows at a time (pyarrow
`iter_batches`), and hands them to `dlrm.data.binary.SplitBinaryWriter` - the same writer the
synthetic generator and transcoder use. Memory is a few batches, whatever the dataset size. The
row order Spark produced is checked on the way: (shuffle_key, day, line) must never decrease.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from dlrm.data.binary import SplitBinaryWriter
from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, PreprocessError
from preproc_spark3.transform import ORDER_COLUMNS

_PART_NUMBER = re.compile(r"part-(\d+)")


def part_files(split_dir: Path) -> list[Path]:
    """Spark's part files of one split, in the order of the rows they hold (by part number)."""
    if not split_dir.is_dir():
        return []  # Spark writes no directory for a split without rows
    numbered = [(int(match.group(1)), p.name, p) for p in split_dir.iterdir()
                if p.name.endswith(".parquet") and (match := _PART_NUMBER.match(p.name))]
    return [path for _, _, path in sorted(numbered)]


def _order_break(keys: list[np.ndarray], previous: tuple | None) -> int:
    """Index of the first row whose (shuffle_key, day, line) is below its predecessor's, else -1."""
    cols = [np.asarray(k, dtype=np.int64) for k in keys]
    if previous is not None:
        cols = [np.concatenate([[p], c]) for p, c in zip(previous, cols)]
    if len(cols[0]) < 2:
        return -1
    greater = np.zeros(len(cols[0]) - 1, dtype=bool)
    equal = np.ones(len(cols[0]) - 1, dtype=bool)
    for c in cols:
        greater |= equal & (c[1:] > c[:-1])
        equal &= c[1:] == c[:-1]
    bad = np.flatnonzero(~(greater | equal))
    if bad.size == 0:
        return -1
    return int(bad[0]) + (0 if previous is not None else 1)


def convert_split(split_dir: Path, out_dir: str, spec, mapping: str, batch_rows: int) -> int:
    """Write one split (`split_dir` = <parquet>/split=<mapping>) as split binary; returns its row count."""
    columns = [LABEL, *NUMERICAL_COLUMNS, *CATEGORICAL_COLUMNS, *ORDER_COLUMNS]
    rows = 0
    previous = None
    with SplitBinaryWriter(out_dir, spec, mapping) as writer:  # an error aborts: no partial files published
        for path in part_files(split_dir):
            for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns):
                data = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in columns}
                keys = [data[name] for name in ORDER_COLUMNS]
                broken = _order_break(keys, previous)
                if broken >= 0:
                    raise PreprocessError(
                        f"{path}: row {rows + broken} of split {mapping} (0-based) is out of order; the parquet "
                        "part files do not hold the rows in (shuffle_key, day, line) order")
                if batch.num_rows:
                    previous = tuple(int(k[-1]) for k in keys)
                writer.write(data[LABEL], np.stack([data[c] for c in NUMERICAL_COLUMNS], axis=1),
                             [data[c] for c in CATEGORICAL_COLUMNS])
                rows += batch.num_rows
    return rows
