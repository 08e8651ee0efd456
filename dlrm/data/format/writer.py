"""Split-binary datasets, writing side: a streaming writer that validates every chunk.

Layout per mapping folder (paths come from the feature spec's `source_spec`):
`label.bin` (bool, 1 byte/row), `numerical.bin` (float16, row-major, one column per numerical
feature), `cat_<i>.bin` (the smallest of int8/int16/int32 holding the feature's cardinality; a
multi-hot feature stores `max_hotness` values per row, its ids first, then -1 padding) and
`group.bin` (the `map` channel's group id, int64). Files are headerless, little-endian, fixed-size
records, so row r of every file is at r * record size.
"""
from __future__ import annotations

import os
from typing import NamedTuple, Optional, Sequence, Union

import numpy as np

from dlrm.data.format.bags import bad_bag_rows, bad_onehot_rows, bag_problem, onehot_problem
from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import SPEC_FILE_NAME, BinaryChunk, FeatureSpec
from dlrm.data.format.spec_rules import LABEL_CHANNEL, MAP_CHANNEL, NUMERICAL_CHANNEL
from dlrm.output_dir import OutputDir


def dataset_dir(path: str, flag: str) -> OutputDir:
    """A split-binary dataset's output directory (the generator's --out, the transcoder's --output): an
    earlier dataset is recognised by its feature spec."""
    return OutputDir(path, flag, "dataset", SPEC_FILE_NAME)


class MappingChunks(NamedTuple):
    """A mapping's files by role."""

    label: BinaryChunk
    numerical: Optional[BinaryChunk]
    categorical: list[BinaryChunk]  # one per table, in table order (one-hot, then multi-hot)
    group: Optional[BinaryChunk]


def split_by_channel(chunks: list[BinaryChunk]) -> MappingChunks:
    """The label, numerical (or None), categorical (table order) and group (or None) files of a mapping."""
    by_channel: dict[str, list[BinaryChunk]] = {LABEL_CHANNEL: [], NUMERICAL_CHANNEL: [], MAP_CHANNEL: []}
    categorical = []
    for chunk in chunks:
        if chunk.channel in by_channel:
            by_channel[chunk.channel].append(chunk)
        else:
            categorical.append(chunk)
    numerical, group = by_channel[NUMERICAL_CHANNEL], by_channel[MAP_CHANNEL]
    return MappingChunks(by_channel[LABEL_CHANNEL][0], numerical[0] if numerical else None, categorical,
                         group[0] if group else None)


def _spec_at(spec: FeatureSpec, directory: str) -> FeatureSpec:
    return FeatureSpec(spec.feature_spec, spec.source_spec, spec.channel_spec, spec.metadata, directory)


class SplitBinaryWriter:
    """Appends row chunks to one mapping's files; `close()` publishes them (atomic rename).

    Files are written as `<file>.partial` and renamed on `close()`, so a crashed writer never leaves
    a file that looks complete. Every chunk is validated before anything of it is written: labels in
    {0, 1}, numericals finite and within float16 range, ids in [0, cardinality); errors name the
    file, feature and row (row = index within the mapping, counting earlier chunks).
    """

    def __init__(self, out_dir: str, spec: FeatureSpec, mapping: str, sync: bool = True):
        """`sync=False` skips the fsync on close: for intermediate files that are copied and synced later."""
        self.sync = sync
        self.spec = _spec_at(spec, os.path.abspath(out_dir))
        self.spec.validate(check_files=False, mappings=[mapping])
        self.mapping = mapping
        self.chunks = self.spec.binary_chunks(mapping)
        self.label_chunk, self.numerical_chunk, self.categorical_chunks, self.group_chunk = \
            split_by_channel(self.chunks)
        self.cardinalities = self.spec.cardinalities
        self.rows_written = 0
        self._files = {}
        for chunk in self.chunks:
            os.makedirs(os.path.dirname(chunk.path), exist_ok=True)
            self._files[chunk.path] = open(chunk.path + ".partial", "wb")

    # -- public API
    def write(self, label, numerical, categorical: Union[np.ndarray, Sequence[np.ndarray]], group=None) -> None:
        """Append rows. label [n] (bool or 0/1), numerical [n, num_numerical], categorical [n, total_hotness]
        (each table's ids side by side in table order, multi-hot rows padded with -1) or a sequence of
        one array per table ([n] for one-hot, [n, max_hotness] for multi-hot: columns avoid a
        transpose); group [n] integers when the spec has a `map` channel."""
        if not self._files:
            raise RuntimeError("SplitBinaryWriter is closed")
        label = np.asarray(label)
        n = label.shape[0] if label.ndim == 1 else -1
        if n < 0:
            raise DataError(f"label must be 1-D, got shape {label.shape}", self.label_chunk.path, self.spec.label_name)
        label_bytes = self._check_label(label)
        numerical_bytes = self._check_numerical(numerical, n)
        columns = self._check_categorical(categorical, n)
        group_bytes = self._check_group(group, n)
        self._files[self.label_chunk.path].write(label_bytes)
        if self.numerical_chunk is not None:
            self._files[self.numerical_chunk.path].write(numerical_bytes)
        for chunk, column in zip(self.categorical_chunks, columns):
            self._files[chunk.path].write(column)
        if self.group_chunk is not None:
            self._files[self.group_chunk.path].write(group_bytes)
        self.rows_written += n

    def close(self) -> int:
        """Flush, fsync (unless `sync=False`) and rename the files into place; returns the rows written."""
        for path, f in self._files.items():
            f.flush()
            if self.sync:
                os.fsync(f.fileno())
            f.close()
            os.replace(path + ".partial", path)
        self._files = {}
        return self.rows_written

    def abort(self) -> None:
        """Close and delete the partial files (nothing is published)."""
        for path, f in self._files.items():
            f.close()
            try:
                os.remove(path + ".partial")
            except FileNotFoundError:
                pass
        self._files = {}

    def __enter__(self) -> "SplitBinaryWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- validation helpers
    def _check_label(self, label: np.ndarray) -> bytes:
        chunk = self.label_chunk
        if label.dtype == np.bool_:
            return label.tobytes()
        if not np.issubdtype(label.dtype, np.number):
            raise DataError(f"labels must be numbers, got dtype {label.dtype}", chunk.path, chunk.features[0])
        bad = np.flatnonzero((label != 0) & (label != 1))
        if bad.size:
            r = int(bad[0])
            raise DataError(f"label {label[r]:g} is not 0 or 1", chunk.path, chunk.features[0], self.rows_written + r)
        return label.astype(np.bool_).tobytes()

    def _check_numerical(self, numerical, n: int) -> bytes:
        chunk = self.numerical_chunk
        if chunk is None:
            return b""
        numerical = np.asarray(numerical)
        width = len(chunk.features)
        if numerical.shape != (n, width):
            raise DataError(f"numerical chunk has shape {numerical.shape}, expected ({n}, {width})", chunk.path)
        if not np.issubdtype(numerical.dtype, np.floating) and not np.issubdtype(numerical.dtype, np.integer):
            raise DataError(f"numerical values must be numbers, got dtype {numerical.dtype}", chunk.path)
        with np.errstate(over="ignore", invalid="ignore"):
            stored = numerical.astype(chunk.dtype)
            ok = np.isfinite(numerical) & np.isfinite(stored)
        if not ok.all():
            r, c = (int(i) for i in np.argwhere(~ok)[0])
            value = numerical[r, c]
            limit = float(np.finfo(chunk.dtype).max)
            why = "is NaN or inf" if not np.isfinite(value) else f"overflows {chunk.dtype.name} (max {limit:g})"
            raise DataError(f"numerical value {value} {why}", chunk.path, chunk.features[c], self.rows_written + r)
        return np.ascontiguousarray(stored).tobytes()

    def _check_categorical(self, categorical, n: int) -> list[bytes]:
        columns = self._table_columns(categorical, n)
        return [self._check_ids(chunk, card, col, n)
                for chunk, card, col in zip(self.categorical_chunks, self.cardinalities, columns)]

    def _table_columns(self, categorical, n: int) -> list[np.ndarray]:
        """One id array per table from either input form (see `write`)."""
        tables = len(self.categorical_chunks)
        if not isinstance(categorical, np.ndarray):
            columns = [np.asarray(c) for c in categorical]
            if len(columns) != tables:
                raise DataError(f"got {len(columns)} categorical columns, expected {tables}")
            return columns
        total = sum(chunk.hotness for chunk in self.categorical_chunks)
        if categorical.shape != (n, total):
            raise DataError(f"categorical chunk has shape {categorical.shape}, expected ({n}, {total})",
                            self.categorical_chunks[0].path if tables else None)
        bounds = np.cumsum([0] + [chunk.hotness for chunk in self.categorical_chunks])
        return [categorical[:, a:b] if chunk.multi_hot else categorical[:, a]
                for chunk, a, b in zip(self.categorical_chunks, bounds[:-1], bounds[1:])]

    def _check_ids(self, chunk: BinaryChunk, card: int, col: np.ndarray, n: int) -> bytes:
        """The stored bytes of one table's ids, after checking them (errors name file, feature and row)."""
        shapes: list[tuple[int, ...]] = [(n,)]  # a multi-hot column is [n, max_hotness] ([n] too if that is 1)
        if chunk.multi_hot:
            shapes = [(n, chunk.hotness)] + (shapes if chunk.hotness == 1 else [])
        if col.shape not in shapes:
            raise DataError(f"id column has shape {col.shape}, expected {' or '.join(map(str, shapes))}",
                            chunk.path, chunk.features[0])
        if not np.issubdtype(col.dtype, np.integer):
            raise DataError(f"ids must be integers, got dtype {col.dtype}", chunk.path, chunk.features[0])
        rows = col.reshape(n, chunk.hotness)
        bad = np.flatnonzero(bad_bag_rows(rows, card) if chunk.multi_hot else bad_onehot_rows(col, card))
        if bad.size:
            r = int(bad[0])
            why = bag_problem(rows[r], card) if chunk.multi_hot else onehot_problem(col[r], card)
            raise DataError(why, chunk.path, chunk.features[0], self.rows_written + r)
        return np.ascontiguousarray(rows, dtype=chunk.dtype).tobytes()

    def _check_group(self, group, n: int) -> bytes:
        chunk = self.group_chunk
        if chunk is None:
            if group is not None:
                raise DataError("got group ids, but the feature spec has no map channel")
            return b""
        name = chunk.features[0]
        values = None if group is None else np.asarray(group)
        if values is None or values.shape != (n,) or not np.issubdtype(values.dtype, np.integer):
            got = "none" if values is None else f"shape {values.shape}, dtype {values.dtype}"
            raise DataError(f"group ids must be {n} integers (the map channel), got {got}", chunk.path, name)
        limits = np.iinfo(chunk.dtype)
        bad = np.flatnonzero((values < limits.min) | (values > limits.max))
        if bad.size:
            r = int(bad[0])
            raise DataError(f"group id {int(values[r])} does not fit {chunk.dtype.name}", chunk.path, name,
                            self.rows_written + r)
        return values.astype(chunk.dtype).tobytes()


def write_split_binary(out_dir: str, spec: FeatureSpec, mapping: str, label, numerical, categorical,
                       group=None) -> int:
    """Write one whole mapping in a single call (tests, small datasets)."""
    with SplitBinaryWriter(out_dir, spec, mapping) as writer:
        writer.write(label, numerical, categorical, group)
    return writer.rows_written
