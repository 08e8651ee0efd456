"""Compiled (numba) kernels for the multi-hot id files: decode into the batch, and check without decoding.

A multi-hot file holds `hotness` ids per row, real ids first, then -1 padding (`dlrm.data.format.bags`
states the rules in numpy: the reference these loops match). Each function takes one stored dtype's
files (`RowSources.bags8` ...) and their (table, first batch column, hotness) rows, and keeps the
earliest bad (row, table) seen so far, so a caller chains the three dtypes.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, inline="always")
def _row_is_bad(values, offset, hotness, cardinality):
    """Whether values[offset:offset + hotness] breaks the rules: an id outside [0, cardinality) or an id
    after -1 padding (-1 itself is padding)."""
    padded = False
    for c in range(hotness):
        v = np.int64(values[offset + c])
        if v < -1 or v >= cardinality or (padded and v != -1):
            return True
        padded = v == -1
    return False


@numba.njit(nogil=True, cache=True)
def decode_bag_group(bags, meta, cards, first, out, best_row, best_table):
    """Widen file rows first .. first + len(out) of these multi-hot files into their columns of `out`
    (int32 [rows, total hotness]); returns the earliest (row, table) of a bad row, or the best so far."""
    n = out.shape[0]
    for k in range(meta.shape[0]):
        table, start, hotness = meta[k, 0], meta[k, 1], meta[k, 2]
        src = bags[k][first * hotness:(first + n) * hotness]
        for r in range(n):
            for c in range(hotness):
                out[r, start + c] = np.int32(src[r * hotness + c])
        for r in range(min(n, best_row + 1)):
            if _row_is_bad(src, r * hotness, hotness, cards[table]):
                if r < best_row or table < best_table:
                    best_row, best_table = r, table
                break
    return best_row, best_table


@numba.njit(nogil=True, cache=True)
def check_bag_group(bags, meta, cards, lo, hi, best_row, best_table):
    """The earliest (file row, table) of a bad row among file rows [lo, hi) of these multi-hot files, or
    the best so far (`best_row`, `best_table`) when that is earlier (row first, then table)."""
    for k in range(meta.shape[0]):
        table, hotness = meta[k, 0], meta[k, 2]
        src = bags[k][lo * hotness:hi * hotness]
        for r in range(min(hi - lo, best_row - lo + 1)):
            if _row_is_bad(src, r * hotness, hotness, cards[table]):
                if lo + r < best_row or table < best_table:
                    best_row, best_table = lo + r, table
                break
    return best_row, best_table
