"""A split-binary mapping's files, memory-mapped read-only: what the batch reader decodes and the
start-up check (`dlrm.data.reader.validate`) checks."""
from __future__ import annotations

import mmap

import numpy as np

from dlrm.data.format.bags import bag_problem, onehot_problem
from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import BinaryChunk, FeatureSpec
from dlrm.data.format.writer import split_by_channel
from dlrm.data.reader import decode


def _map_file(chunk: BinaryChunk, rows: int) -> np.ndarray:
    """Read-only memory map of a whole file as a flat array (zero-length files give an empty array)."""
    if rows == 0:
        return decode.empty_mapping(chunk.dtype)
    with open(chunk.path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=chunk.dtype)


class MappedFiles:
    """A split-binary mapping's files, memory-mapped read-only and grouped for the compiled kernels.

    Shared by the batch reader (decode) and the start-up value check (no decode), so both name a bad
    value the same way.
    """

    def __init__(self, spec: FeatureSpec, mapping: str):
        self.mapping = mapping
        self.chunks = spec.binary_chunks(mapping)
        self.num_rows = spec.num_rows(mapping)
        self.label_chunk, self.numerical_chunk, self.categorical_chunks, self.group_chunk = \
            split_by_channel(self.chunks)
        self.num_numerical = len(self.numerical_chunk.features) if self.numerical_chunk else 0
        self.num_categorical = len(self.categorical_chunks)
        self.num_onehot = sum(not chunk.multi_hot for chunk in self.categorical_chunks)
        self.total_hotness = sum(chunk.hotness for chunk in self.categorical_chunks)
        numerical = None if self.numerical_chunk is None else _map_file(self.numerical_chunk, self.num_rows)
        self.columns = [_map_file(c, self.num_rows) for c in self.categorical_chunks]
        self.group = None if self.group_chunk is None else _map_file(self.group_chunk, self.num_rows)
        tables = self.categorical_chunks
        self.sources = decode.row_sources(_map_file(self.label_chunk, self.num_rows), numerical, self.num_numerical,
                                          self.columns, spec.cardinalities, [c.hotness for c in tables],
                                          [c.multi_hot for c in tables])

    def check_rows(self, begin: int, end: int, threads: int = 1,
                   block_rows: int = decode.CHECK_BLOCK_ROWS) -> tuple[int, tuple[int, int, int]]:
        """(positive labels, (kind, column, row) of the earliest bad value or decode.NO_ERROR) of rows
        [begin, end), checked without decoding (see `decode.check_rows`)."""
        return decode.check_rows(self.sources, begin, end, threads, block_rows)

    def raise_for(self, found: tuple[int, int, int]) -> None:
        """Raise the DataError of a (kind, column, row) a check or decode reported, if any."""
        if found[0] >= 0:
            raise self.bad_value(*found)

    def bad_value(self, kind: int, column: int, row: int) -> DataError:
        """The error naming file, feature and row of a value the decode or the check rejected."""
        if kind == decode.LABEL:
            chunk, why = self.label_chunk, f"label byte {int(self.sources.label[row])} is not 0 or 1"
        elif kind == decode.NUMERICAL and self.numerical_chunk is not None:
            chunk, at = self.numerical_chunk, row * self.num_numerical + column
            bits = self.sources.half if self.sources.half.size else self.sources.single
            why = f"numerical value {bits[at:at + 1].view(chunk.dtype)[0]} is NaN or inf"
        else:
            chunk, card = self.categorical_chunks[column], int(self.sources.cards[column])
            values = self.columns[column][row * chunk.hotness:(row + 1) * chunk.hotness]
            why = bag_problem(values, card) if chunk.multi_hot else onehot_problem(values[0], card)
        return DataError(why, chunk.path, chunk.features[column if kind == decode.NUMERICAL else 0], row)
