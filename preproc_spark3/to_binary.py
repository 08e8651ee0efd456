"""Write the transformed rows as split binary, in parallel: each task writes whole chunks, then each
output file is assembled from its chunks by a task of its own.

1. The rows are hash-partitioned by chunk id and sorted within each partition by (chunk, shuffle_key,
   day, line) (see preproc_spark3.chunks: a chunk is a consecutive range of its split's order). Each
   task streams its partition as Arrow batches (`conversion_batch_rows` rows at a time, so memory stays
   bounded) into the data layer's `SplitBinaryWriter` - one writer per chunk, under
   `<work>/c<chunk>/<split>/` - and, with --parquet, into `parquet/split=<split>/part-<index>.parquet`.
   The order is checked on the way: (shuffle_key, day, line) never decreases within a chunk.
2. Every output file (`<split>/label.bin`, `numerical.bin`, `cat_<i>.bin`) is the concatenation of that
   file of the split's chunks in chunk order, copied inside the kernel; the files are spread over
   the task slots.
"""
from __future__ import annotations

import os
import re
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from preproc_spark3.chunks import ChunkLayout
from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, SPLITS, PreprocessError
from preproc_spark3.dictionary import IdLookup
from preproc_spark3.transform import ORDER_COLUMNS

_PART_NUMBER = re.compile(r"part-(\d+)")
_RESULT_SCHEMA = "chunk int, rows long"


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


class _ChunkWriter:
    """One chunk's split-binary files (and optional parquet file), written batch by batch."""

    def __init__(self, chunk: int, spec, work: str, layout: ChunkLayout, parquet_dir: Optional[str]):
        from dlrm.data.binary import SplitBinaryWriter

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

    def write(self, batch) -> None:
        """batch: Arrow rows of this chunk, continuing its order."""
        data = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in batch.schema.names}
        keys = [data[name] for name in ORDER_COLUMNS]
        broken = _order_break(keys, self.previous)
        if broken >= 0:
            raise PreprocessError(f"row {self.rows + broken} of chunk {self.chunk} (split {self.split}) is out of "
                                  "(shuffle_key, day, line) order")
        self.previous = tuple(int(k[-1]) for k in keys)
        self.binary.write(data[LABEL], np.stack([data[c] for c in NUMERICAL_COLUMNS], axis=1),
                          [data[c] for c in CATEGORICAL_COLUMNS])
        if self.parquet_path is not None:
            import pyarrow.parquet as pq

            table = batch.drop_columns(["chunk"])
            if self.parquet is None:
                self.parquet = pq.ParquetWriter(self.parquet_path, table.schema, compression="snappy")
            self.parquet.write_batch(table)
        self.rows += batch.num_rows

    def close(self) -> int:
        self.binary.close()
        if self.parquet is not None:
            self.parquet.close()
        return self.rows

    def abort(self) -> None:
        self.binary.abort()
        if self.parquet is not None:
            self.parquet.close()


def _with_ids(batch, lookup: IdLookup):
    """The batch with the looked-up features' raw values replaced by their ids."""
    import pyarrow as pa

    arrays = [pa.array(lookup.ids(CATEGORICAL_COLUMNS.index(name), column))
              if name in CATEGORICAL_COLUMNS and CATEGORICAL_COLUMNS.index(name) in lookup.tables else column
              for name, column in zip(batch.schema.names, batch.columns)]
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _write_partition(spec, work: str, layout: ChunkLayout, parquet_dir: Optional[str], batches,
                     lookup: Any = None) -> Iterator:
    """mapInArrow body: the partition's rows, sorted by (chunk, order) -> one writer per chunk.
    lookup: a broadcast IdLookup for the features whose ids are still raw values (or None)."""
    import pyarrow as pa

    ids = lookup.value if lookup is not None else None
    written: list[tuple[int, int]] = []
    writer: Optional[_ChunkWriter] = None
    try:
        for batch in batches:
            if ids is not None:
                batch = _with_ids(batch, ids)
            chunks = batch.column("chunk").to_numpy(zero_copy_only=False)
            cuts = [0, *(np.flatnonzero(chunks[1:] != chunks[:-1]) + 1).tolist(), len(chunks)]
            for a, b in zip(cuts[:-1], cuts[1:]):
                if b == a:
                    continue
                if writer is None or writer.chunk != int(chunks[a]):
                    if writer is not None:
                        written.append((writer.chunk, writer.close()))
                    writer = _ChunkWriter(int(chunks[a]), spec, work, layout, parquet_dir)
                writer.write(batch.slice(a, b - a))
    except BaseException:
        if writer is not None:
            writer.abort()  # nothing of a failed chunk is published
        raise
    if writer is not None:
        written.append((writer.chunk, writer.close()))
    yield pa.RecordBatch.from_pydict({"chunk": pa.array([c for c, _ in written], pa.int32()),
                                      "rows": pa.array([n for _, n in written], pa.int64())})


def write_chunks(frame, spec, work: str, layout: ChunkLayout, parquet_dir: Optional[str],
                 lookup: Optional[IdLookup] = None) -> dict[int, int]:
    """frame: the transform's output (raw values for the features of `lookup`) -> chunk id -> rows written
    (chunks without rows are absent)."""
    sorted_rows = frame.repartition("chunk").sortWithinPartitions("chunk", *ORDER_COLUMNS)
    shipped = frame.sparkSession.sparkContext.broadcast(lookup) if lookup is not None else None
    body = partial(_write_partition, spec, work, layout, parquet_dir, lookup=shipped)
    counts = sorted_rows.mapInArrow(body, _RESULT_SCHEMA).collect()
    return {row["chunk"]: row["rows"] for row in counts}


def _concatenate(item: tuple[str, list[str]]) -> None:
    """Write `target` as the concatenation of `parts` (in order), published by an atomic rename."""
    target, parts = item
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".partial", "wb") as sink:
        for part in parts:
            with open(part, "rb") as source:
                left = os.fstat(source.fileno()).st_size
                while left > 0:
                    left -= os.copy_file_range(source.fileno(), sink.fileno(), left)
        sink.flush()
        os.fsync(sink.fileno())
    os.replace(target + ".partial", target)


def assemble_splits(spark, spec, out_dir: str, work: str, layout: ChunkLayout, rows: dict[int, int]) -> dict[str, int]:
    """Concatenate the chunk files into each split's files (files spread over the task slots); rows per split."""
    from dlrm.data.feature_spec import FeatureSpec

    items = []
    for split in SPLITS:
        chunk_ids = [c for c in layout.chunk_ids(split) if c in rows]
        for binary in FeatureSpec(spec.feature_spec, spec.source_spec, spec.channel_spec, spec.metadata,
                                  os.path.abspath(out_dir)).binary_chunks(split):
            relative = os.path.relpath(binary.path, os.path.abspath(out_dir))
            items.append((binary.path, [os.path.join(chunk_dir(work, c), relative) for c in chunk_ids]))
    tasks = max(1, min(len(items), 2 * spark.sparkContext.defaultParallelism))  # a task costs more than a file
    spark.sparkContext.parallelize(items, tasks).foreach(_concatenate)
    return {split: sum(rows.get(c, 0) for c in layout.chunk_ids(split)) for split in SPLITS}
