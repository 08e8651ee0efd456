"""The arrays the decode and check kernels read and write, and what they report.

Every kernel takes a mapping's file arrays as one `RowSources` and, when it decodes, the batch's
output arrays as one `BatchArrays` (numba passes named tuples of arrays to compiled code as they are).
A kernel checks the values it reads (label in {0, 1}, numericals finite, ids in [0, cardinality),
multi-hot rows padded with -1 only at their end) and returns the position of the first bad one
instead of raising, so the caller can name the file, the feature and the row.

Tables come in contract order: the one-hot ones first (table j at batch column j), then the
multi-hot ones (`max_hotness` columns each), so the one-hot tables keep their fast kernel.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

# What a kernel reports first when several values of one row are bad: the lowest kind.
LABEL, NUMERICAL, CATEGORICAL = 0, 1, 2
NO_ERROR = (-1, -1, -1)  # (kind, column, row) when every value is good

# Rows per block of the categorical kernel. Longer blocks read each id file in longer sequential
# runs; shorter ones keep the scratch (tables x rows int32: 426 KB for 26 tables at 4,096 rows) in
# L2 for the transpose (measurements: docs/data.md). The scratch rows are padded so
# their stride is not a multiple of 4 KiB (eight loads 4 KiB apart would all hit one L1 cache set).
CATEGORICAL_BLOCK_ROWS = 4096
SCRATCH_PAD = 16
# Rows per block of the value check without decoding: blocks are the unit of work of its threads.
CHECK_BLOCK_ROWS = 1 << 16


class RowSources(NamedTuple):
    """A mapping's file arrays, grouped once per reader for the kernels (all read-only)."""

    label: np.ndarray  # uint8 [rows]
    half: np.ndarray  # uint16 float16 bit patterns [rows * width] (empty unless the file is float16)
    single: np.ndarray  # uint32 float32 bit patterns [rows * width] (empty unless the file is float32)
    width: int  # numerical features per row
    cols8: tuple  # the int8 id columns (one empty dummy when there are none: a tuple holds one array type)
    targets8: np.ndarray  # int64 table index of each of them (empty when there are none)
    cols16: tuple
    targets16: np.ndarray
    cols32: tuple
    targets32: np.ndarray
    cards: np.ndarray  # int64 cardinality per table
    onehot: int  # one-hot tables (tables 0 .. onehot-1, batch columns 0 .. onehot-1)
    bags8: tuple  # the int8 multi-hot files, flat [rows * hotness] (one empty dummy when there are none)
    bag_meta8: np.ndarray  # int64 [files, 3]: (table, first batch column, hotness) of each of them
    bags16: tuple
    bag_meta16: np.ndarray
    bags32: tuple
    bag_meta32: np.ndarray


class BatchArrays(NamedTuple):
    """A batch's output arrays as the kernels write them."""

    label: np.ndarray  # float32 [rows]
    numerical_bits: np.ndarray  # uint32 [rows * width]: the float32 output's bit patterns
    categorical: np.ndarray  # int32 [rows, total hotness], C order


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view (file mappings are read-only: one array type for the compiled kernels)."""
    view = array.view()
    view.setflags(write=False)
    return view


def empty_mapping(dtype) -> np.ndarray:
    """Empty array typed like a read-only file mapping."""
    return read_only(np.empty(0, dtype=dtype))


def row_sources(label: np.ndarray, numerical: np.ndarray | None, width: int, columns: Sequence[np.ndarray],
                cardinalities, hotness: Sequence[int] = (), multi_hot: Sequence[bool] = ()) -> RowSources:
    """Group a mapping's arrays for the kernels: the numericals as float bit patterns, the id files by
    kind (one-hot, multi-hot) and stored dtype. `hotness` / `multi_hot` per table (default: one-hot)."""
    half, single = empty_mapping(np.uint16), empty_mapping(np.uint32)
    if numerical is not None and numerical.dtype.itemsize == 2:
        half = read_only(numerical.view(np.uint16))
    elif numerical is not None:
        single = read_only(numerical.view(np.uint32))
    bags = list(multi_hot) or [False] * len(columns)
    onehot = next((j for j, bag in enumerate(bags) if bag), len(bags))
    if not all(bags[onehot:]):
        raise ValueError("the one-hot tables must come before the multi-hot ones (contract order)")
    widths = list(hotness) or [1] * len(columns)
    starts = np.cumsum([0] + widths)

    def group(dtype, multi: bool) -> tuple[tuple, np.ndarray]:
        chosen = [j for j, col in enumerate(columns) if col.dtype == dtype and bags[j] == multi]
        meta = [[j, starts[j], widths[j]] for j in chosen] if multi else chosen
        return (tuple(read_only(columns[j]) for j in chosen) or (empty_mapping(dtype),),
                np.asarray(meta, np.int64).reshape((-1, 3) if multi else (-1,)))

    dtypes = (np.int8, np.int16, np.int32)
    (cols8, targets8), (cols16, targets16), (cols32, targets32) = (group(d, False) for d in dtypes)
    (bags8, meta8), (bags16, meta16), (bags32, meta32) = (group(d, True) for d in dtypes)
    return RowSources(read_only(label.view(np.uint8)), half, single, width, cols8, targets8, cols16, targets16,
                      cols32, targets32, np.asarray(cardinalities, np.int64), onehot, bags8, meta8, bags16, meta16,
                      bags32, meta32)


def id_groups(sources: RowSources) -> tuple:
    """((one-hot columns, table indices) per stored id dtype) of `sources`."""
    return ((sources.cols8, sources.targets8), (sources.cols16, sources.targets16),
            (sources.cols32, sources.targets32))


def bag_groups(sources: RowSources) -> tuple:
    """((multi-hot files, (table, first column, hotness) rows) per stored id dtype) of `sources`."""
    return ((sources.bags8, sources.bag_meta8), (sources.bags16, sources.bag_meta16),
            (sources.bags32, sources.bag_meta32))


def total_hotness(sources: RowSources) -> int:
    """Width of the batch's categorical array: one column per one-hot table, `hotness` per multi-hot one."""
    return sources.onehot + sum(int(meta[:, 2].sum()) for _, meta in bag_groups(sources))


def new_scratch(parts: int, tables: int, block_rows: int = CATEGORICAL_BLOCK_ROWS) -> np.ndarray:
    """Scratch for a compiled row decode: [parts, one-hot tables, block rows + pad] int32 (one block per part)."""
    return np.empty((parts, tables, block_rows + SCRATCH_PAD), dtype=np.int32)


def earliest(results) -> tuple[int, int, int]:
    """The (kind, column, row) with the lowest row (then kind) among several results, else NO_ERROR."""
    bad = [(int(result[0]), int(result[1]), int(result[2])) for result in results if result[0] >= 0]
    return min(bad, key=lambda r: (r[2], r[0])) if bad else NO_ERROR
