"""Split-binary datasets, writing side: a streaming writer that validates every chunk.

Layout per mapping folder (paths come from the feature spec's `source_spec`):
`label.bin` (bool, 1 byte/row), `numerical.bin` (float16, row-major, one column per numerical
feature), `cat_<i>.bin` (the smallest of int8/int16/int32 holding the feature's cardinality).
Files are headerless, little-endian, fixed-size records, so row r of every file is at r * record size.
"""
from __future__ import annotations

import os
from typing import Sequence, Union

import numpy as np

from dlrm.data.errors import DataError
from dlrm.data.feature_spec import CATEGORICAL_CHANNEL, LABEL_CHANNEL, NUMERICAL_CHANNEL, BinaryChunk, FeatureSpec


def split_by_channel(chunks: list[BinaryChunk]) -> tuple[BinaryChunk, "BinaryChunk | None", list[BinaryChunk]]:
    """(label chunk, numerical chunk or None, categorical chunks in table order) of a mapping's files."""
    by_channel: dict[str, list[BinaryChunk]] = {LABEL_CHANNEL: [], NUMERICAL_CHANNEL: [], CATEGORICAL_CHANNEL: []}
    for chunk in chunks:
        by_channel[chunk.channel].append(chunk)
    numerical = by_channel[NUMERICAL_CHANNEL][0] if by_channel[NUMERICAL_CHANNEL] else None
    return by_channel[LABEL_CHANNEL][0], numerical, by_channel[CATEGORICAL_CHANNEL]


def _spec_at(spec: FeatureSpec, directory: str) -> FeatureSpec:
    return FeatureSpec(spec.feature_spec, spec.source_spec, spec.channel_spec, spec.metadata, directory)


class SplitBinaryWriter:
    """Appends row chunks to one mapping's files; `close()` publishes them (atomic rename).

    Files are written as `<file>.partial` and renamed on `close()`, so a crashed writer never leaves
    a file that looks complete. Every chunk is validated before anything of it is written: labels in
    {0, 1}, numericals finite and within float16 range, ids in [0, cardinality); errors name the
    file, feature and row (row = index within the mapping, counting earlier chunks).
    """

    def __init__(self, out_dir: str, spec: FeatureSpec, mapping: str):
        self.spec = _spec_at(spec, os.path.abspath(out_dir))
        self.spec.validate(check_files=False, mappings=[mapping])
        self.mapping = mapping
        self.chunks = self.spec.binary_chunks(mapping)
        self.label_chunk, self.numerical_chunk, self.categorical_chunks = split_by_channel(self.chunks)
        self.cardinalities = self.spec.cardinalities
        self.rows_written = 0
        self._files = {}
        for chunk in self.chunks:
            os.makedirs(os.path.dirname(chunk.path), exist_ok=True)
            self._files[chunk.path] = open(chunk.path + ".partial", "wb")

    # -- public API
    def write(self, label, numerical, categorical: Union[np.ndarray, Sequence[np.ndarray]]) -> None:
        """Append rows. label [n] (bool or 0/1), numerical [n, num_numerical], categorical [n, tables]
        or a sequence of `tables` 1-D id arrays of length n (columns avoid a transpose)."""
        if not self._files:
            raise RuntimeError("SplitBinaryWriter is closed")
        label = np.asarray(label)
        n = label.shape[0] if label.ndim == 1 else -1
        if n < 0:
            raise DataError(f"label must be 1-D, got shape {label.shape}", self.label_chunk.path, self.spec.label_name)
        label_bytes = self._check_label(label)
        numerical_bytes = self._check_numerical(numerical, n)
        columns = self._check_categorical(categorical, n)
        self._files[self.label_chunk.path].write(label_bytes)
        if self.numerical_chunk is not None:
            self._files[self.numerical_chunk.path].write(numerical_bytes)
        for chunk, column in zip(self.categorical_chunks, columns):
            self._files[chunk.path].write(column)
        self.rows_written += n

    def close(self) -> int:
        """Flush, fsync and rename the files into place; returns the number of rows written."""
        for path, f in self._files.items():
            f.flush()
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
            raise DataError(f"numerical value {value!r} {why}", chunk.path, chunk.features[c], self.rows_written + r)
        return np.ascontiguousarray(stored).tobytes()

    def _check_categorical(self, categorical, n: int) -> list[bytes]:
        tables = len(self.categorical_chunks)
        if isinstance(categorical, np.ndarray):
            if categorical.shape != (n, tables):
                raise DataError(f"categorical chunk has shape {categorical.shape}, expected ({n}, {tables})",
                                self.categorical_chunks[0].path if tables else None)
            columns = [categorical[:, j] for j in range(tables)]
        else:
            columns = [np.asarray(c) for c in categorical]
            if len(columns) != tables:
                raise DataError(f"got {len(columns)} categorical columns, expected {tables}")
        out = []
        for chunk, card, col in zip(self.categorical_chunks, self.cardinalities, columns):
            if col.shape != (n,):
                raise DataError(f"id column has shape {col.shape}, expected ({n},)", chunk.path, chunk.features[0])
            if not np.issubdtype(col.dtype, np.integer):
                raise DataError(f"ids must be integers, got dtype {col.dtype}", chunk.path, chunk.features[0])
            if n and (col.min() < 0 or col.max() >= card):
                r = int(np.flatnonzero((col < 0) | (col >= card))[0])
                raise DataError(f"id {int(col[r])} is outside [0, {card})", chunk.path, chunk.features[0],
                                self.rows_written + r)
            out.append(col.astype(chunk.dtype).tobytes())
        return out


def write_split_binary(out_dir: str, spec: FeatureSpec, mapping: str, label, numerical, categorical) -> int:
    """Write one whole mapping in a single call (tests, small datasets)."""
    with SplitBinaryWriter(out_dir, spec, mapping) as writer:
        writer.write(label, numerical, categorical)
    return writer.rows_written
