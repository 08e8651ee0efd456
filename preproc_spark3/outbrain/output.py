"""Writing the dataset: each sorted split written in parallel by the tasks (its partitions are consecutive
ranges of its order) with the data layer's SplitBinaryWriter, then assembled in order (and, with --parquet,
NVIDIA's parquet layout, one part per partition); the quarantine file.

A task converts `batch_rows` rows at a time from Arrow, so no process holds a whole split.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.outbrain import DISPLAY, LABEL, MULTI_HOT, NUMERICAL, ONE_HOT
from dlrm.data.synthetic.widedeep_reference import FEATURES
from dlrm.features import PADDING_ID
from preproc_spark3.outbrain.bad_rows import QUARANTINE_COLUMNS
from preproc_spark3.outbrain.config import PARQUET_SPLITS, TEST, TRAIN
from preproc_spark3.outbrain.features import OUTPUT_COLUMNS
from preproc_spark3.quarantine import MalformedSummary, write_lines
from preproc_spark3.to_binary import concatenate

PARQUET_DIR = "parquet"
WORK_DIR = "_work"  # the tasks' per-partition files, removed once assembled


def dataset_spec(base_directory: Optional[str] = None) -> FeatureSpec:
    """NVIDIA's Wide & Deep spec: `clicked`, the 13 numericals, one-hot then multi-hot ids (the bucket counts
    of dlrm.data.outbrain, the reference's embedding dims), `display_id` in channel `map`."""
    dims = {f.name: f.dim for f in FEATURES}
    spec = FeatureSpec.split_binary(LABEL, list(NUMERICAL), {f.name: f.buckets for f in ONE_HOT},
                                    multi_hot={f.name: (f.buckets, f.max_ids) for f in MULTI_HOT}, group=DISPLAY,
                                    mappings=(TRAIN, TEST), base_directory=base_directory)
    for name, dim in dims.items():
        spec.feature_spec[name]["embedding_dim"] = dim
    return spec


def _padded(lists, width: int) -> np.ndarray:
    """An Arrow list array of at most `width` ids per row -> int64 [n, width], PADDING_ID after the ids."""
    offsets = lists.offsets.to_numpy()
    values = lists.values.to_numpy(zero_copy_only=False)[offsets[0]:offsets[-1]]
    lengths = np.diff(offsets)
    out = np.full((len(lengths), width), PADDING_ID, dtype=np.int64)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    out[rows, np.arange(values.size) - np.repeat(offsets[:-1] - offsets[0], lengths)] = values
    return out


def _column(batch, name: str, dtype) -> np.ndarray:
    return batch.column(name).to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def part_dir(work: str, partition: int) -> str:
    return os.path.join(work, f"p{partition:06d}")


@dataclass(frozen=True)
class PartWriter:
    """The task side of `write_split`: one sorted partition's Arrow batches -> its own split-binary files
    under `<work>/p<partition>/` (and its parquet part), checked by the data layer's SplitBinaryWriter."""

    spec: FeatureSpec
    mapping: str
    work: str
    parquet_dir: Optional[str]

    def run(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        from dlrm.data.format.writer import SplitBinaryWriter

        context = TaskContext.get()
        assert context is not None, "PartWriter.run runs in a Spark task"
        partition = context.partitionId()
        binary = SplitBinaryWriter(part_dir(self.work, partition), self.spec, self.mapping, sync=False)
        parquet: Any = None
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                numerical = np.stack([_column(batch, name, np.float32) for name in NUMERICAL], axis=1)
                binary.write(_column(batch, LABEL, np.int8), numerical,
                             [*(_column(batch, f.name, np.int64) for f in ONE_HOT),
                              *(_padded(batch.column(f.name), f.max_ids) for f in MULTI_HOT)],
                             _column(batch, DISPLAY, np.int64))
                if self.parquet_dir is not None:
                    parquet = self._write_parquet(parquet, batch, partition)
        except BaseException:
            binary.abort()
            raise
        finally:
            if parquet is not None:
                parquet.close()
        rows = binary.close()
        yield pa.RecordBatch.from_pydict({"partition": [partition], "rows": [rows]})

    def _write_parquet(self, writer: Any, batch: Any, partition: int) -> Any:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_batches([batch])
        table = table.cast(parquet_schema(table.schema))
        if writer is None:
            assert self.parquet_dir is not None
            os.makedirs(self.parquet_dir, exist_ok=True)
            writer = pq.ParquetWriter(os.path.join(self.parquet_dir, f"part-{partition:05d}.parquet"), table.schema,
                                      compression="snappy")
        writer.write_table(table)
        return writer


def parquet_schema(schema: Any) -> Any:
    """NVIDIA's columns from the job's Arrow `schema`: label int32, display_id and hashed ids int64, id lists,
    numericals float32."""
    import pyarrow as pa

    types = {LABEL: pa.int32(), **{name: pa.float32() for name in NUMERICAL}}
    return pa.schema([pa.field(field.name, types.get(field.name, field.type)) for field in schema])


def _write_empty_parquet(parquet_dir: str, columns: Any) -> None:
    """A split without rows still gets its parquet directory: one part with no rows and the split's columns."""
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    os.makedirs(parquet_dir, exist_ok=True)
    pq.write_table(parquet_schema(to_arrow_schema(columns)).empty_table(),
                   os.path.join(parquet_dir, "part-00000.parquet"), compression="snappy")


def write_split(ordered, out_dir: str, spec: FeatureSpec, mapping: str, parquet: bool, batch_rows: int) -> int:
    """Write the sorted DataFrame `ordered` (OUTPUT_COLUMNS) as `mapping`; the rows written.

    Each task writes its partition (a consecutive range of the order) under `<out_dir>/_work/`, converting
    `batch_rows` rows at a time from Arrow; the driver then concatenates every file's parts in partition order.
    """
    work = os.path.join(out_dir, WORK_DIR, mapping)
    parquet_dir = os.path.join(out_dir, PARQUET_DIR, PARQUET_SPLITS[mapping]) if parquet else None
    ordered.sparkSession.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_rows))
    job = PartWriter(spec, mapping, work, parquet_dir)
    columns = ordered.select(*OUTPUT_COLUMNS)
    written = dict(columns.mapInArrow(job.run, "partition long, rows long").collect())
    if parquet_dir is not None and not any(written.values()):
        _write_empty_parquet(parquet_dir, columns.schema)
    partitions = sorted(p for p, rows in written.items() if rows)
    for binary in spec.binary_chunks(mapping):
        relative = os.path.relpath(binary.path, os.path.abspath(out_dir))
        concatenate((binary.path, [os.path.join(part_dir(work, p), relative) for p in partitions]))
    shutil.rmtree(os.path.join(out_dir, WORK_DIR))
    return sum(written.values())


def write_quarantine(quarantine, raw_dir: str, out_dir: str, total_lines: int) -> MalformedSummary:
    """Stream the quarantine DataFrame (QUARANTINE_COLUMNS) to `<out_dir>/quarantine.jsonl` in file and line
    order, in the Criteo job's record format, and summarise it."""
    ordered = quarantine.orderBy("file_order", "line").select(*QUARANTINE_COLUMNS[1:])
    return write_lines(ordered.toLocalIterator(), raw_dir, out_dir, total_lines)
