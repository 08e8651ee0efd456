"""Compiled (numba) decode and check kernels: the fast implementations of `dlrm.data.reader.decode.Kernels`.

Why compiled: numpy's float16 -> float32 cast and its strided column scatter with a cast cost
several times the raw read of the same bytes. These loops read straight
from the file mappings, convert and check in one pass and release the GIL, so the prefetch threads
overlap the training step. `dlrm.data.reader.decode_numpy` holds the plain numpy version of each kernel:
same arguments, same results.
"""
from __future__ import annotations

import numba
import numpy as np

from dlrm.data.reader.decode_arrays import CATEGORICAL, LABEL, NUMERICAL, SCRATCH_PAD, RowSources, earliest
from dlrm.data.reader.decode_bags import check_bag_group, decode_bag_group
from dlrm.data.reader.numba_threads import use_threads
from dlrm.data.reader.simd import half_to_float_16, transpose_8x8

HALF_SPECIAL = np.uint16(0x7C00)  # exponent bits all set: inf or NaN
SINGLE_SPECIAL = np.uint32(0x7F800000)


@numba.njit(nogil=True, cache=True)
def _first_bad_label(labels):
    """The first index whose label byte is not 0 or 1, else -1 (one pass when there is none)."""
    acc = np.uint8(0)
    for r in range(labels.shape[0]):
        acc |= labels[r]
    if acc > 1:
        for r in range(labels.shape[0]):
            if labels[r] > 1:
                return r
    return -1


@numba.njit(nogil=True, cache=True)
def decode_label(src, out):
    """bool bytes -> float32; returns the first index whose byte is not 0 or 1, else -1."""
    acc = np.uint8(0)
    for i in range(src.shape[0]):
        v = src[i]
        acc |= v
        out[i] = v
    return _first_bad_label(src) if acc > 1 else -1


@numba.njit(nogil=True, cache=True)
def _first_special(values, special):
    """The first index whose exponent bits (`special`) are all set, else -1 (one pass when there is none)."""
    count = 0
    for i in range(values.shape[0]):
        count += (values[i] & special) == special
    if count:
        for i in range(values.shape[0]):
            if (values[i] & special) == special:
                return i
    return -1


@numba.njit(nogil=True, cache=True)
def decode_half(src, out_bits):
    """float16 bit patterns -> float32 bit patterns, 16 values per conversion instruction (the last
    few through a 16-value buffer). Returns the first inf/NaN index, else -1."""
    n = src.shape[0]
    vectorised = n - n % 16
    bad = -1
    for c0 in range(0, vectorised, 4096):  # chunks: the check re-reads the source from L1
        c1 = min(vectorised, c0 + 4096)
        for i in range(c0, c1, 16):
            half_to_float_16(src, i, out_bits, i)
        found = _first_special(src[c0:c1], HALF_SPECIAL)
        if found >= 0 and bad < 0:
            bad = c0 + found
    if vectorised < n:
        tail, tail_bits = np.zeros(16, np.uint16), np.empty(16, np.uint32)
        tail[:n - vectorised] = src[vectorised:]
        half_to_float_16(tail, 0, tail_bits, 0)
        out_bits[vectorised:] = tail_bits[:n - vectorised]
        found = _first_special(src[vectorised:], HALF_SPECIAL)
        if found >= 0 and bad < 0:
            bad = vectorised + found
    return bad


@numba.njit(nogil=True, cache=True)
def decode_single(src, out_bits):
    """float32 bit patterns -> the same bits (a copy); returns the first inf/NaN index, else -1."""
    for i in range(src.shape[0]):
        out_bits[i] = src[i]
    return _first_special(src, SINGLE_SPECIAL)


@numba.njit(nogil=True, cache=True, inline="always")
def _widen_block(cols, targets, wide, r0, r1, lo, hi):
    """Copy rows [r0, r1) of each id column to its row of `wide` as int32, noting min and max."""
    m = r1 - r0
    for k in range(targets.shape[0]):
        col = cols[k][r0:r1]
        j = targets[k]
        row = wide[j, :m]
        low = np.int32(0)
        high = np.int32(0)
        for r in range(m):
            v = np.int32(col[r])
            if v < low:
                low = v
            if v > high:
                high = v
            row[r] = v
        lo[j] = low
        hi[j] = high


@numba.njit(nogil=True, cache=True)
def _first_bad_widened(wide, m, lo, hi, cards):
    """(table, row) of the earliest id outside [0, cardinality) among the first `m` widened rows (the
    lowest table of that row), else (-1, m); `lo`/`hi` are each table's min and max."""
    bad_table, bad_row = -1, m
    for j in range(lo.shape[0]):
        if lo[j] < 0 or hi[j] >= cards[j]:
            for r in range(bad_row):  # only rows before the earliest found so far
                if wide[j, r] < 0 or wide[j, r] >= cards[j]:
                    bad_table, bad_row = j, r
                    break
    return bad_table, bad_row


@numba.njit(nogil=True, cache=True)
def _transpose_block(wide, tables, m, block):
    """block[r, j] = wide[j, r] for the first `m` rows and `tables` tables: 8x8 tiles, then the leftover
    rows and tables (`block` rows may be wider: the multi-hot columns follow).

    When the table count is not a multiple of 8 the last tile overlaps the one before (it rewrites a
    few columns with the same values); fewer than 8 tables are copied one by one."""
    row_stride = block.shape[1]
    stride = wide.shape[1]
    tiled_tables = tables if tables >= 8 else 0
    tiled_rows = m - m % 8
    for r in range(0, tiled_rows, 8):
        for j0 in range(0, tiled_tables, 8):
            j = min(j0, tables - 8)
            transpose_8x8(wide, j * stride + r, stride, block, r * row_stride + j, row_stride)
    for r in range(tiled_rows, m):
        for j in range(tiled_tables):
            block[r, j] = wide[j, r]
    for r in range(m):
        for j in range(tiled_tables, tables):
            block[r, j] = wide[j, r]


@numba.njit(nogil=True, cache=True)
def _decode_onehot(sources, first, wide, out):
    """File rows first .. first + len(out) of the one-hot id columns -> their columns of `out`.

    Rows go in blocks of the scratch `wide`'s size ([one-hot tables, block rows + SCRATCH_PAD] int32):
    each column's block is widened into `wide` (contiguous, vectorised, with the range check), then
    transposed into `out` in 8x8 tiles. Returns (table, row of out) of the first id outside
    [0, cardinality) in row-major order (the earliest row, its lowest table), else (-1, len(out)).
    """
    n, tables = out.shape[0], sources.onehot
    lo = np.zeros(tables, dtype=np.int32)
    hi = np.zeros(tables, dtype=np.int32)
    block_rows = wide.shape[1] - SCRATCH_PAD
    for r0 in range(0, n, block_rows):
        r1 = min(n, r0 + block_rows)
        _widen_block(sources.cols8, sources.targets8, wide, first + r0, first + r1, lo, hi)
        _widen_block(sources.cols16, sources.targets16, wide, first + r0, first + r1, lo, hi)
        _widen_block(sources.cols32, sources.targets32, wide, first + r0, first + r1, lo, hi)
        bad_table, bad_row = _first_bad_widened(wide, r1 - r0, lo, hi, sources.cards)
        if bad_table >= 0:
            return bad_table, r0 + bad_row
        _transpose_block(wide, tables, r1 - r0, out[r0:r1])
    return -1, n


@numba.njit(nogil=True, cache=True)
def decode_categorical(sources, first, wide, out):
    """File rows first .. first + len(out) of the id files -> out int32 [rows, total hotness] (C order):
    the one-hot tables (`_decode_onehot`), then the multi-hot ones (`decode_bag_group`). Returns (table, row
    of out) of the earliest bad row (its lowest table), else (-1, -1)."""
    n = out.shape[0]
    table, row = -1, n
    if sources.onehot:
        table, row = _decode_onehot(sources, first, wide, out)
    best_row, best_table = row, (table if table >= 0 else sources.cards.shape[0])
    best_row, best_table = decode_bag_group(sources.bags8, sources.bag_meta8, sources.cards, first, out,
                                            best_row, best_table)
    best_row, best_table = decode_bag_group(sources.bags16, sources.bag_meta16, sources.cards, first, out,
                                            best_row, best_table)
    best_row, best_table = decode_bag_group(sources.bags32, sources.bag_meta32, sources.cards, first, out,
                                            best_row, best_table)
    if best_row < n:
        return best_table, best_row
    return -1, -1


@numba.njit(nogil=True, cache=True)
def decode_part(sources, first, lo, hi, wide, out):
    """Batch rows [lo, hi) (file rows first + lo .. first + hi) into the batch's arrays `out`.

    Returns (kind, column, batch row) of the earliest bad value (kinds LABEL < NUMERICAL < CATEGORICAL
    within a row), else (-1, -1, -1).
    """
    kind, column, row = -1, -1, hi
    bad = decode_label(sources.label[first + lo:first + hi], out.label[lo:hi])
    if bad >= 0:
        kind, column, row = LABEL, 0, lo + bad
    width = sources.width
    if width:
        begin, end, into = (first + lo) * width, (first + hi) * width, out.numerical_bits[lo * width:hi * width]
        bad = max(decode_half(sources.half[begin:end], into), decode_single(sources.single[begin:end], into))
        if bad >= 0 and lo + bad // width < row:
            kind, column, row = NUMERICAL, bad % width, lo + bad // width
    if out.categorical.shape[1]:
        table, bad = decode_categorical(sources, first + lo, wide, out.categorical[lo:hi])
        if table >= 0 and lo + bad < row:
            kind, column, row = CATEGORICAL, table, lo + bad
    if kind < 0:
        return -1, -1, -1
    return kind, column, row


@numba.njit(nogil=True, cache=True)
def part_bounds(rows, parts, part):
    """[lo, hi) of `part` of `parts` near-equal row ranges (cut at multiples of 8: whole transpose tiles)."""
    lo = (rows * part // parts) // 8 * 8
    hi = rows if part == parts - 1 else (rows * (part + 1) // parts) // 8 * 8
    return lo, hi


@numba.njit(nogil=True, cache=True, parallel=True)
def _decode_parts(sources, first, wides, out, status):
    """`decode_part` on len(status) row ranges in parallel; status[p] = part p's result."""
    parts = status.shape[0]
    # A parallel loop cannot take in a named tuple holding tuples of arrays: it takes the fields.
    (label, half, single, width, cols8, targets8, cols16, targets16, cols32, targets32, cards, onehot,
     bags8, bag_meta8, bags16, bag_meta16, bags32, bag_meta32) = sources
    for p in numba.prange(parts):
        lo, hi = part_bounds(out.label.shape[0], parts, p)
        part_sources = RowSources(label, half, single, width, cols8, targets8, cols16, targets16, cols32, targets32,
                                  cards, onehot, bags8, bag_meta8, bags16, bag_meta16, bags32, bag_meta32)
        kind, column, row = decode_part(part_sources, first, lo, hi, wides[p], out)
        status[p, 0] = kind
        status[p, 1] = column
        status[p, 2] = row


def decode_rows(sources, first: int, parts: int, wides: np.ndarray, out) -> tuple[int, int, int]:
    """Decode len(out.label) rows from file row `first` into `out`, in `parts` row ranges on numba's
    threads (one parallel region; one part runs on the calling thread). `wides`: scratch [parts,
    tables, stride] (`decode_arrays.new_scratch`). Returns (kind, column, batch row) of the earliest
    bad value whatever the split, else NO_ERROR."""
    if parts == 1:
        return decode_part(sources, first, 0, out.label.shape[0], wides[0], out)
    use_threads(parts)
    status = np.empty((parts, 3), dtype=np.int64)
    _decode_parts(sources, first, wides, out, status)
    return earliest(status)


# ====================================================================== value checks without decoding
@numba.njit(nogil=True, cache=True)
def _first_bad_id(cols, targets, cards, lo, hi, best_row, best_table):
    """(row, table) of the earliest id outside [0, cardinality) in rows [lo, hi) of these columns, or
    the best one so far (`best_row`, `best_table`) when that is earlier (row first, then table)."""
    for k in range(targets.shape[0]):
        ids = cols[k][lo:hi]  # loops over a slice from 0 vectorise (no negative-index handling)
        j = targets[k]
        low = ids[0]
        high = ids[0]
        for r in range(ids.shape[0]):  # min/max first: one vectorised pass when every id is fine
            low = min(low, ids[r])
            high = max(high, ids[r])
        if low < 0 or high >= cards[j]:
            for r in range(min(ids.shape[0], best_row - lo + 1)):
                if ids[r] < 0 or ids[r] >= cards[j]:
                    if lo + r < best_row or j < best_table:
                        best_row, best_table = lo + r, j
                    break
    return best_row, best_table


@numba.njit(nogil=True, cache=True)
def _first_bad_numerical(sources, lo, hi):
    """Index (into rows [lo, hi) x width values) of the first inf/NaN, else -1."""
    width = sources.width
    return max(_first_special(sources.half[lo * width:hi * width], HALF_SPECIAL),
               _first_special(sources.single[lo * width:hi * width], SINGLE_SPECIAL))


@numba.njit(nogil=True, cache=True)
def check_block(sources, lo, hi):
    """Check file rows [lo, hi) without decoding them: (kind, column, file row) of the earliest bad value
    (as `decode_part`) or (-1, -1, -1), and the number of positive labels, as one 4-tuple."""
    labels = sources.label[lo:hi]
    positives = 0
    for r in range(labels.shape[0]):
        positives += labels[r]
    kind, column, row = -1, -1, hi
    bad = _first_bad_label(labels)
    if bad >= 0:
        kind, column, row = LABEL, 0, lo + bad
    bad = _first_bad_numerical(sources, lo, hi) if sources.width else -1
    if bad >= 0 and lo + bad // sources.width < row:
        kind, column, row = NUMERICAL, bad % sources.width, lo + bad // sources.width
    if hi > lo and sources.cards.shape[0]:
        id_row, table = hi, sources.cards.shape[0]
        id_row, table = _first_bad_id(sources.cols8, sources.targets8, sources.cards, lo, hi, id_row, table)
        id_row, table = _first_bad_id(sources.cols16, sources.targets16, sources.cards, lo, hi, id_row, table)
        id_row, table = _first_bad_id(sources.cols32, sources.targets32, sources.cards, lo, hi, id_row, table)
        id_row, table = check_bag_group(sources.bags8, sources.bag_meta8, sources.cards, lo, hi, id_row, table)
        id_row, table = check_bag_group(sources.bags16, sources.bag_meta16, sources.cards, lo, hi, id_row, table)
        id_row, table = check_bag_group(sources.bags32, sources.bag_meta32, sources.cards, lo, hi, id_row, table)
        if id_row < row:
            kind, column, row = CATEGORICAL, table, id_row
    if kind < 0:
        row = -1
    return kind, column, row, positives


@numba.njit(nogil=True, cache=True, inline="always")
def _check_one_block(sources, begin, end, block_rows, block, status, positives):
    lo = begin + block * block_rows
    kind, column, row, count = check_block(sources, lo, min(end, lo + block_rows))
    status[block, 0] = kind
    status[block, 1] = column
    status[block, 2] = row
    positives[block] = count


@numba.njit(nogil=True, cache=True)
def _check_blocks_serial(sources, begin, end, block_rows, status, positives):
    for block in range(status.shape[0]):
        _check_one_block(sources, begin, end, block_rows, block, status, positives)


@numba.njit(nogil=True, cache=True, parallel=True)
def _check_blocks_parallel(sources, begin, end, block_rows, status, positives):
    (label, half, single, width, cols8, targets8, cols16, targets16, cols32, targets32, cards, onehot,
     bags8, bag_meta8, bags16, bag_meta16, bags32, bag_meta32) = sources  # see above
    for block in numba.prange(status.shape[0]):
        block_sources = RowSources(label, half, single, width, cols8, targets8, cols16, targets16, cols32,
                                   targets32, cards, onehot, bags8, bag_meta8, bags16, bag_meta16, bags32, bag_meta32)
        _check_one_block(block_sources, begin, end, block_rows, block, status, positives)


def check_rows(sources, begin: int, end: int, threads: int, block_rows: int) -> tuple[int, tuple[int, int, int]]:
    """`check_block` over file rows [begin, end) in blocks of `block_rows`, on `threads` of numba's
    threads. Returns (positive labels, (kind, column, file row) of the earliest bad value or NO_ERROR);
    the result depends on neither the threads nor the blocks."""
    blocks = -(-(end - begin) // block_rows)
    status = np.empty((blocks, 3), dtype=np.int64)
    positives = np.empty(blocks, dtype=np.int64)
    if threads > 1 and blocks > 1:
        use_threads(threads)
        _check_blocks_parallel(sources, begin, end, block_rows, status, positives)
    else:
        _check_blocks_serial(sources, begin, end, block_rows, status, positives)
    return int(positives.sum()), earliest(status)
