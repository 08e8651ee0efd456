"""Write the split-binary files, in parallel: the second reduce job writes whole chunks (one task
each), then each output file is assembled from its chunks by a task of its own.

1. A chunk's task (partition 1 + 26 + c of the shuffle, see parse_job.Partitions) concatenates the
   parse tasks' blobs of that chunk, orders the rows by (shuffle_key, day, line) (np.lexsort; a chunk
   is a consecutive range of its split's order, see preproc_spark3.chunks), looks the categorical ids
   up (dictionary.IdLookup, memory-mapped) and writes them, `conversion_batch_rows` rows at a time,
   into the data layer's `SplitBinaryWriter` under `<work>/c<chunk>/<split>/` and, with --parquet,
   `parquet/split=<split>/part-<index>.parquet`. The writer checks the order on the way.
2. Every output file (`<split>/label.bin`, `numerical.bin`, `cat_<i>.bin`) is the concatenation of that
   file of the split's chunks in chunk order, copied inside the kernel; the files are spread over
   the task slots.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from dlrm.atomic import replaced_atomically
from preproc_spark3.chunks import ChunkLayout
from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, SPLITS, PreprocessError
from preproc_spark3.dictionary import IdLookup
from preproc_spark3.parse_job import CHUNK_COLUMNS, Partitions, unpack_categorical

_PART_NUMBER = re.compile(r"part-(\d+)")


def part_files(split_dir: Path) -> list[Path]:
    """Parquet part files of one split, in the order of the rows they hold (by part number)."""
    if not split_dir.is_dir():
        return []
    numbered = [(int(match.group(1)), p.name, p) for p in split_dir.iterdir()
                if p.name.endswith(".parquet") and (match := _PART_NUMBER.match(p.name))]
    return [path for _, _, path in sorted(numbered)]


def chunk_dir(work: str, chunk: int) -> str:
    return os.path.join(work, f"c{chunk:06d}")


def _order_break(keys: list[np.ndarray], previous: Optional[tuple]) -> int:
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


@dataclass
class ChunkRows:
    """Rows of one chunk in output order: order columns, label, transformed numericals, ids."""

    shuffle_key: np.ndarray  # int64 [n]
    day: np.ndarray  # int32 [n]
    line: np.ndarray  # int64 [n]
    label: np.ndarray  # float32 [n]
    numerical: np.ndarray  # float32 [n, 13]
    ids: np.ndarray  # int32 [n, 26]

    def table(self):
        """The parquet columns: shuffle_key, day, line, label, I1..I13, C1..C26."""
        import pyarrow as pa

        columns = {"shuffle_key": self.shuffle_key, "day": self.day, "line": self.line, LABEL: self.label}
        columns.update({name: self.numerical[:, i] for i, name in enumerate(NUMERICAL_COLUMNS)})
        columns.update({name: self.ids[:, i] for i, name in enumerate(CATEGORICAL_COLUMNS)})
        return pa.table({name: pa.array(np.ascontiguousarray(v)) for name, v in columns.items()})


class ChunkWriter:
    """One chunk's split-binary files (and optional parquet file), written batch by batch."""

    def __init__(self, chunk: int, spec, work: str, layout: ChunkLayout, parquet_dir: Optional[str]):
        from dlrm.data.format.writer import SplitBinaryWriter

        self.chunk = chunk
        self.split, index = layout.split_of(chunk)
        self.binary = SplitBinaryWriter(chunk_dir(work, chunk), spec, self.split, sync=False)  # synced once assembled
        self.parquet: Any = None  # pyarrow.parquet.ParquetWriter once the first batch arrives
        self.parquet_path: Optional[str] = None
        if parquet_dir is not None:
            directory = os.path.join(parquet_dir, f"split={self.split}")
            os.makedirs(directory, exist_ok=True)
            self.parquet_path = os.path.join(directory, f"part-{index:05d}.parquet")
        self.previous: Optional[tuple] = None
        self.rows = 0

    def write(self, rows: ChunkRows) -> None:
        """rows: the next rows of this chunk, continuing its order."""
        keys = [rows.shuffle_key, rows.day, rows.line]
        broken = _order_break(keys, self.previous)
        if broken >= 0:
            raise PreprocessError(f"row {self.rows + broken} of chunk {self.chunk} (split {self.split}) is out of "
                                  "(shuffle_key, day, line) order")
        if not len(rows.line):
            return
        self.previous = tuple(int(k[-1]) for k in keys)
        self.binary.write(rows.label, rows.numerical, rows.ids)
        if self.parquet_path is not None:
            import pyarrow.parquet as pq

            table = rows.table()
            if self.parquet is None:
                self.parquet = pq.ParquetWriter(self.parquet_path, table.schema, compression="snappy")
            self.parquet.write_table(table)
        self.rows += len(rows.line)

    def close(self) -> int:
        self.binary.close()
        if self.parquet is not None:
            self.parquet.close()
        return self.rows

    def abort(self) -> None:
        self.binary.abort()
        if self.parquet is not None:
            self.parquet.close()


@dataclass(frozen=True)
class ChunkJob:
    """The second reduce job: what every chunk task needs (shipped once with the task closure)."""

    spec: Any  # dlrm.data.format.feature_spec.FeatureSpec of the dataset
    work: str  # per-chunk files go to <work>/c<chunk>/
    layout: ChunkLayout
    parquet_dir: Optional[str]
    lookup_dir: str  # dictionary.write_feature's arrays
    batch_rows: int  # rows transformed and written at a time

    def run(self, records: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, int]]:
        """One chunk partition's blobs -> (chunk, rows written); nothing for a chunk without rows."""
        records = iter(records)
        first = next(records, None)
        if first is None:
            return
        chunk = first[0] - Partitions.chunk(0)
        blobs = [first[1], *(blob for _, blob in records)]
        columns = {name: np.concatenate([b[name] for b in blobs]) for name in CHUNK_COLUMNS}
        del blobs
        order = np.lexsort((columns["line"], columns["day"], columns["shuffle_key"]))
        lookup = IdLookup.open(self.lookup_dir)
        writer = ChunkWriter(chunk, self.spec, self.work, self.layout, self.parquet_dir)
        try:
            for start in range(0, len(order), self.batch_rows):
                rows = order[start:start + self.batch_rows]
                values = unpack_categorical(columns["categorical"][rows], columns["missing"][rows])
                ids = np.stack([lookup.ids(f, values[:, f]) for f in range(values.shape[1])], axis=1)
                writer.write(ChunkRows(columns["shuffle_key"][rows], columns["day"][rows], columns["line"][rows],
                                       columns["label"][rows], columns["numerical"][rows], ids))
        except BaseException:
            writer.abort()  # nothing of a failed chunk is published
            raise
        yield chunk, writer.close()


def concatenate(item: tuple[str, list[str]]) -> None:
    """Write `target` as the concatenation of `parts` (in order), published by an atomic rename."""
    target, parts = item
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with replaced_atomically(target) as sink:
        for part in parts:
            with open(part, "rb") as source:
                left = os.fstat(source.fileno()).st_size
                while left > 0:
                    left -= os.copy_file_range(source.fileno(), sink.fileno(), left)


def assemble_splits(spark, spec, out_dir: str, work: str, layout: ChunkLayout, rows: dict[int, int]) -> dict[str, int]:
    """Concatenate the chunk files into each split's files (files spread over the task slots); rows per split."""
    from dlrm.data.format.feature_spec import FeatureSpec

    items = []
    for split in SPLITS:
        chunk_ids = [c for c in layout.chunk_ids(split) if c in rows]
        for binary in FeatureSpec(spec.feature_spec, spec.source_spec, spec.channel_spec, spec.metadata,
                                  os.path.abspath(out_dir)).binary_chunks(split):
            relative = os.path.relpath(binary.path, os.path.abspath(out_dir))
            items.append((binary.path, [os.path.join(chunk_dir(work, c), relative) for c in chunk_ids]))
    tasks = max(1, min(len(items), 2 * spark.sparkContext.defaultParallelism))  # a task costs more than a file
    spark.sparkContext.parallelize(items, tasks).foreach(concatenate)
    return {split: sum(rows.get(c, 0) for c in layout.chunk_ids(split)) for split in SPLITS}
