"""Plain numpy versions of the decode and check kernels: the reference for the compiled ones.

Each function takes the same arguments and returns the same result as its namesake in
`dlrm.data.reader.decode_numba` (the scratch arguments are unused here), and writes the same bits. They
define what a kernel does; the reader uses them where the compiled decode cannot run (see
`dlrm.data.reader.decode.select_kernels`).
"""
from __future__ import annotations

import numpy as np

from dlrm.data.format.bags import bad_bag_rows, bad_onehot_rows
from dlrm.data.reader.decode_arrays import (
    CATEGORICAL,
    LABEL,
    NO_ERROR,
    NUMERICAL,
    BatchArrays,
    RowSources,
    bag_groups,
    earliest,
    id_groups,
    total_hotness,
)


def _first(mask: np.ndarray) -> int:
    found = np.flatnonzero(mask)
    return int(found[0]) if found.size else -1


def decode_label(src: np.ndarray, out: np.ndarray) -> int:
    """bool bytes -> float32; returns the first index whose byte is not 0 or 1, else -1."""
    out[:] = src
    return _first(src > 1)


def decode_half(src: np.ndarray, out_bits: np.ndarray) -> int:
    """float16 bit patterns -> float32 bit patterns; returns the first inf/NaN index, else -1."""
    out_bits[:] = src.view(np.float16).astype(np.float32).view(np.uint32)
    return _first((src & 0x7C00) == 0x7C00)


def decode_single(src: np.ndarray, out_bits: np.ndarray) -> int:
    """float32 bit patterns -> the same bits; returns the first inf/NaN index, else -1."""
    out_bits[:] = src
    return _first((src & 0x7F800000) == 0x7F800000)


def _gather_ids(sources: RowSources, first: int, out: np.ndarray) -> None:
    """File rows first .. first + len(out) of every id file -> out [rows, total hotness] (table order)."""
    n = out.shape[0]
    for cols, targets in id_groups(sources):
        for col, j in zip(cols, targets):  # an empty group's dummy column has no target: skipped
            out[:, j] = col[first:first + n]
    for bags, meta in bag_groups(sources):
        for bag, (_, start, hotness) in zip(bags, meta):
            out[:, start:start + hotness] = bag[first * hotness:(first + n) * hotness].reshape(n, hotness)


def _first_bad_id(sources: RowSources, ids: np.ndarray) -> tuple[int, int]:
    """(table, row) of the earliest bad row of ids [rows, total hotness] (its lowest table), else (-1, -1)."""
    bad = np.zeros((ids.shape[0], sources.cards.shape[0]), bool)
    onehot = sources.onehot
    bad[:, :onehot] = bad_onehot_rows(ids[:, :onehot], sources.cards[:onehot])
    for _, meta in bag_groups(sources):
        for j, start, hotness in meta:
            bad[:, j] = bad_bag_rows(ids[:, start:start + hotness], sources.cards[j])
    bad_rows, bad_tables = np.nonzero(bad)  # row-major order
    return (int(bad_tables[0]), int(bad_rows[0])) if bad_rows.size else (-1, -1)


def decode_categorical(sources: RowSources, first: int, wide, out: np.ndarray) -> tuple[int, int]:
    """File rows first .. first + len(out) of the id files -> out int32 [rows, total hotness]; (table, row
    of out) of the earliest bad row (an id outside [0, cardinality), padding before an id), its lowest
    table, else (-1, -1)."""
    _gather_ids(sources, first, out)
    return _first_bad_id(sources, out)


def _bad_numerical(sources: RowSources, lo: int, hi: int) -> tuple[int, int, int]:
    width = sources.width
    values = sources.half if sources.half.size else sources.single
    special = 0x7C00 if sources.half.size else 0x7F800000
    bad = _first((values[lo * width:hi * width] & special) == special)
    return (NUMERICAL, bad % width, lo + bad // width) if bad >= 0 else NO_ERROR


def _bad_id(sources: RowSources, lo: int, hi: int) -> tuple[int, int, int]:
    ids = np.empty((hi - lo, total_hotness(sources)), np.int32)
    _gather_ids(sources, lo, ids)
    table, row = _first_bad_id(sources, ids)
    return (CATEGORICAL, table, lo + row) if table >= 0 else NO_ERROR


def check_block(sources: RowSources, lo: int, hi: int) -> tuple[int, int, int, int]:
    """Check file rows [lo, hi) without decoding: (kind, column, file row) of the earliest bad value
    (kinds LABEL < NUMERICAL < CATEGORICAL within a row) or NO_ERROR, and the positive labels."""
    labels = sources.label[lo:hi]
    bad = _first(labels > 1)
    found = [(LABEL, 0, lo + bad) if bad >= 0 else NO_ERROR, _bad_numerical(sources, lo, hi),
             _bad_id(sources, lo, hi)]
    return (*earliest(found), int(labels.sum(dtype=np.int64)))


def decode_part(sources: RowSources, first: int, lo: int, hi: int, wide, out: BatchArrays) -> tuple[int, int, int]:
    """Batch rows [lo, hi) (file rows first + lo .. first + hi) into `out`; (kind, column, batch row)
    of the earliest bad value, else NO_ERROR."""
    width = sources.width
    decode_label(sources.label[first + lo:first + hi], out.label[lo:hi])
    numerical = slice((first + lo) * width, (first + hi) * width)
    if sources.half.size:
        decode_half(sources.half[numerical], out.numerical_bits[lo * width:hi * width])
    else:
        decode_single(sources.single[numerical], out.numerical_bits[lo * width:hi * width])
    decode_categorical(sources, first + lo, wide, out.categorical[lo:hi])
    kind, column, row, _ = check_block(sources, first + lo, first + hi)
    return (kind, column, row - first) if kind >= 0 else NO_ERROR


def decode_rows(sources: RowSources, first: int, parts: int, wides, out: BatchArrays) -> tuple[int, int, int]:
    """Decode len(out.label) rows from file row `first` on the calling thread (`parts`, `wides` unused)."""
    return decode_part(sources, first, 0, out.label.shape[0], None, out)
