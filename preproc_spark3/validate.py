"""Parse raw Criteo TSV lines into typed columns and name the first problem of each malformed line.

A well-formed line has 40 tab-separated fields: label (0 or 1), 13 integers (optional sign, at most
18 digits, so they fit int64), 26 categoricals (1-8 hex digits, case-insensitive). Any integer or
categorical field may be empty (missing). Anything else is malformed: the row keeps a `reason`
(e.g. "I3: 'abc' is not an integer (at most 18 digits)") and a `kind` for the summary, and is
quarantined instead of being used.

The parse runs in Spark's Python workers on Arrow batches (`mapInArrow`), vectorised with pyarrow
compute and numpy: one whole-line regex decides well-formedness, and only lines failing it get the
field-by-field check (`line_problem`) that names their first problem.
"""
from __future__ import annotations

import os
import re
from functools import partial
from typing import Iterator, Optional

import numpy as np

from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, RAW_FIELD_COUNT
from preproc_spark3.dictionary import COUNTS_SCHEMA, ValueCounter

_INT = r"-?[0-9]{1,18}"
_HEX = r"[0-9a-fA-F]{1,8}"
INTEGER_PATTERN = f"^{_INT}$"
HEX_PATTERN = f"^{_HEX}$"
# The whole of a well-formed line in one pattern (fields may be empty).
LINE_PATTERN = (rf"^[01](\t({_INT})?){{{len(NUMERICAL_COLUMNS)}}}"
                rf"(\t({_HEX})?){{{len(CATEGORICAL_COLUMNS)}}}$")
SHOWN_CHARS = 32  # how much of a bad field a reason quotes

KIND_FIELD_COUNT, KIND_LABEL, KIND_INTEGER, KIND_CATEGORICAL = "field_count", "label", "integer", "categorical"
_INTEGER_FIELD = re.compile(_INT)
_HEX_FIELD = re.compile(_HEX)

# Columns the raw-line frame brings along (see raw_input.read_lines) and the parse adds.
PROVENANCE_SCHEMA = "day int, file string, block_start long, row_id long"
PARSED_SCHEMA = (f"{PROVENANCE_SCHEMA}, reason string, kind string, value string, {LABEL} int, "
                 + ", ".join([f"{c} long" for c in NUMERICAL_COLUMNS] + [f"{c} long" for c in CATEGORICAL_COLUMNS]))

_HEX_DIGIT = np.zeros(256, dtype=np.int64)
for _c in "0123456789abcdef":
    _HEX_DIGIT[ord(_c)] = _HEX_DIGIT[ord(_c.upper())] = int(_c, 16)


def line_problem(text: str) -> Optional[tuple[str, str]]:
    """(kind, reason) of the first problem of a raw line, or None when it is well formed."""
    fields = text.split("\t")
    if len(fields) != RAW_FIELD_COUNT:
        return KIND_FIELD_COUNT, (f"wrong field count: {len(fields)} tab-separated fields, "
                                  f"expected {RAW_FIELD_COUNT}")
    if fields[0] not in ("0", "1"):
        return KIND_LABEL, f"{LABEL}: '{fields[0][:SHOWN_CHARS]}' is not 0 or 1"
    for name, field in zip(NUMERICAL_COLUMNS, fields[1:]):
        if field and not _INTEGER_FIELD.fullmatch(field):
            return KIND_INTEGER, f"{name}: '{field[:SHOWN_CHARS]}' is not an integer (at most 18 digits)"
    for name, field in zip(CATEGORICAL_COLUMNS, fields[1 + len(NUMERICAL_COLUMNS):]):
        if field and not _HEX_FIELD.fullmatch(field):
            return KIND_CATEGORICAL, f"{name}: '{field[:SHOWN_CHARS]}' is not a hex value (1-8 hex digits)"
    return None


def _hex_values(column):
    """Arrow strings of 0-8 hex digits -> int64 values (the hash read as an unsigned number); '' -> null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    padded = pc.utf8_lpad(column, 8, "0")  # '' -> '00000000', masked below
    offsets = np.frombuffer(padded.buffers()[1], dtype=np.int32)[padded.offset:padded.offset + len(padded) + 1]
    chars = np.frombuffer(padded.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]].reshape(-1, 8)
    digits = _HEX_DIGIT[chars]
    values = np.zeros(len(padded), dtype=np.int64)
    for k in range(8):
        values = (values << 4) | digits[:, k]
    return pa.array(values, mask=pc.equal(column, "").to_numpy(zero_copy_only=False))


def _integers(column):
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column), pa.int64())


def parse_batch(batch):
    """One Arrow batch of raw lines (value + provenance columns) -> the PARSED_SCHEMA columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = batch.column("value")
    n = len(lines)
    good = pc.match_substring_regex(lines, LINE_PATTERN).to_numpy(zero_copy_only=False)
    good_rows = pa.array(np.flatnonzero(good))
    bad_rows = np.flatnonzero(~good)
    fields = pc.split_pattern(pc.take(lines, good_rows), "\t")

    def column(values, arrow_type):
        """Values of the good lines, null on the malformed ones."""
        if not len(bad_rows):
            return values
        full = pa.nulls(n, arrow_type)
        if not len(good_rows):
            return full
        scattered = np.zeros(n, dtype=np.int64)
        scattered[good] = np.arange(len(good_rows))
        return pc.if_else(pa.array(good), pc.take(values, pa.array(scattered)), full)

    out = {name: batch.column(name) for name in ("day", "file", "block_start", "row_id")}
    problems = {int(i): line_problem(lines[int(i)].as_py()) for i in bad_rows}
    for i, problem in problems.items():
        if problem is None:  # the whole-line pattern and the field checks disagree: a bug, not bad data
            raise AssertionError(f"line {lines[i].as_py()!r} fails {LINE_PATTERN!r} but no field check")
    reasons: list[Optional[str]] = [None] * n
    kinds: list[Optional[str]] = [None] * n
    for i, (kind, reason) in ((i, p) for i, p in problems.items() if p is not None):
        reasons[i], kinds[i] = reason, kind
    out["reason"] = pa.array(reasons, pa.string())
    out["kind"] = pa.array(kinds, pa.string())
    out["value"] = pc.if_else(pa.array(~good), lines, pa.scalar(None, pa.string()))
    out[LABEL] = column(pc.cast(pc.list_element(fields, 0), pa.int32()), pa.int32())
    for i, name in enumerate(NUMERICAL_COLUMNS, start=1):
        out[name] = column(_integers(pc.list_element(fields, i)), pa.int64())
    for i, name in enumerate(CATEGORICAL_COLUMNS, start=1 + len(NUMERICAL_COLUMNS)):
        out[name] = column(_hex_values(pc.list_element(fields, i)), pa.int64())
    return pa.RecordBatch.from_pydict(out)


BLOCKS_SCHEMA = "file string, block_start long, first_row_id long, lines long, path string, counts_path string"


def _parse_and_store(directory: str, dictionary_days: tuple[int, ...], batches) -> Iterator:
    """mapInArrow body: parse the task's lines into one parquet file (PARSED_SCHEMA) and count the
    categorical values of its well-formed `dictionary_days` rows into another (COUNTS_SCHEMA); yield,
    per input block, its first row_id and line count, with both files' paths (only files of successful
    attempts are ever listed, so a retried task leaves no duplicate rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "runs inside a Spark task"
    path = os.path.join(directory, f"part-{context.partitionId():05d}-{context.attemptNumber()}.parquet")
    counts_path = path[:-len(".parquet")] + ".counts.parquet"
    counter = ValueCounter(dictionary_days)
    blocks: dict[tuple[str, int], list[int]] = {}
    writer = None
    try:
        for batch in batches:
            parsed = parse_batch(batch)
            counter.add(parsed)
            if writer is None:
                writer = pq.ParquetWriter(path, parsed.schema, compression="snappy")
            writer.write_batch(parsed)
            stats = pa.table({"file": batch.column("file"), "block_start": batch.column("block_start"),
                              "row_id": batch.column("row_id")}).group_by(["file", "block_start"]).aggregate(
                [("row_id", "min"), ("row_id", "count")])
            for file, start, first, lines in zip(*(stats.column(c).to_pylist() for c in
                                                   ("file", "block_start", "row_id_min", "row_id_count"))):
                known = blocks.setdefault((file, start), [first, 0])
                known[0], known[1] = min(known[0], first), known[1] + lines
    finally:
        if writer is not None:
            writer.close()
    pq.write_table(counter.table(), counts_path, compression="snappy")
    keys = sorted(blocks)
    yield pa.RecordBatch.from_pydict({
        "file": pa.array([k[0] for k in keys], pa.string()), "block_start": pa.array([k[1] for k in keys], pa.int64()),
        "first_row_id": pa.array([blocks[k][0] for k in keys], pa.int64()),
        "lines": pa.array([blocks[k][1] for k in keys], pa.int64()),
        "path": pa.array([path] * len(keys), pa.string()),
        "counts_path": pa.array([counts_path] * len(keys), pa.string())})


def parse_lines(spark, lines, directory: str, dictionary_days: tuple[int, ...]):
    """DataFrame[value + PROVENANCE_SCHEMA] -> (DataFrame[PARSED_SCHEMA], DataFrame[COUNTS_SCHEMA], blocks):
    typed columns, `reason`/`kind` (null when well formed) and the raw `value` (kept only for malformed
    lines), stored once under `directory` by the parse tasks; partial value counts of the well-formed
    `dictionary_days` rows (see dictionary.ValueCounter); blocks: (file, block_start, first_row_id, lines)."""
    import shutil

    shutil.rmtree(directory, ignore_errors=True)  # no stale parts of an earlier run
    os.makedirs(directory)
    blocks = lines.mapInArrow(partial(_parse_and_store, directory, tuple(dictionary_days)), BLOCKS_SCHEMA).collect()
    paths = sorted({b["path"] for b in blocks})
    counts_paths = sorted({b["counts_path"] for b in blocks})
    frame = spark.read.schema(PARSED_SCHEMA).parquet(*paths) if paths else spark.createDataFrame([], PARSED_SCHEMA)
    counts = (spark.read.schema(COUNTS_SCHEMA).parquet(*counts_paths) if counts_paths
              else spark.createDataFrame([], COUNTS_SCHEMA))
    return frame, counts, blocks
