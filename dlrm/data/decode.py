"""Compiled (numba) kernels turning raw split-binary records into the trainer's batch arrays.

Why compiled: numpy's float16 -> float32 cast (~2 ns/value) and its strided column scatter with a
cast (~1 ns/value) cost several times the raw read of the same bytes. These loops convert and check
in one pass and release the GIL, so the prefetch thread overlaps the training step.
Each kernel checks its values on the fly (label in {0,1}, numericals finite, ids in
[0, cardinality)); on a failure it returns the offending position instead of raising, so the
caller can name the file, the feature and the row.
"""
from __future__ import annotations

import numba
import numpy as np

# float16 bit pattern -> float32 bit pattern; exact by construction (numpy's own cast). Used for the
# rare subnormal halves; the common case is converted arithmetically (vectorised).
HALF_TO_FLOAT_BITS = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)


@numba.njit(nogil=True, cache=True)
def decode_label(src, out):
    """bool bytes -> float32; returns the first index whose byte is not 0 or 1, else -1."""
    acc = np.uint8(0)
    for i in range(src.shape[0]):
        v = src[i]
        acc |= v
        out[i] = v
    if acc > 1:
        for i in range(src.shape[0]):
            if src[i] > 1:
                return i
    return -1


@numba.njit(nogil=True, cache=True)
def decode_half(src, table_bits, out_bits):
    """float16 bit patterns (flat uint16) -> float32 bit patterns (flat uint32 view of the output).

    Returns the first index holding inf/NaN, else -1.
    """
    n_special = 0
    for i in range(src.shape[0]):
        h = np.uint32(src[i])
        m = h & np.uint32(0x7FFF)
        sign = (h & np.uint32(0x8000)) << np.uint32(16)
        normal = ((m << np.uint32(13)) + np.uint32(112 << 23)) | sign
        out_bits[i] = normal if m != 0 else sign
        # subnormal (exponent 0, mantissa != 0) or inf/NaN (exponent 31): fixed below, rare
        n_special += ((m - np.uint32(1)) < np.uint32(0x3FF)) | (m >= np.uint32(0x7C00))
    if n_special:
        for i in range(src.shape[0]):
            m = src[i] & 0x7FFF
            if m >= 0x7C00:
                return i
            if m != 0 and m < 0x400:
                out_bits[i] = table_bits[src[i]]
    return -1


@numba.njit(nogil=True, cache=True)
def decode_single(src, out):
    """float32 -> float32 copy; returns the first non-finite index, else -1."""
    n_bad = 0
    for i in range(src.shape[0]):
        v = src[i]
        out[i] = v
        n_bad += not np.isfinite(v)
    if n_bad:
        for i in range(src.shape[0]):
            if not np.isfinite(src[i]):
                return i
    return -1


# Rows per block of the categorical kernel: the block's scratch (tables x rows int32) and its slice of
# the output stay in L2. The scratch rows are padded so their stride is not a multiple of 4 KiB
# (26 loads 4 KiB apart would all hit the same L1 cache set).
CATEGORICAL_BLOCK_ROWS = 2048
SCRATCH_PAD = 16


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
            low = min(low, v)
            high = max(high, v)
            row[r] = v
        lo[j] = low
        hi[j] = high


@numba.njit(nogil=True, cache=True)
def decode_categorical(cols8, targets8, cols16, targets16, cols32, targets32, cards, wide, out):
    """Id columns grouped by stored dtype -> out int32 [rows, tables] (C order).

    `colsN` is a tuple of the int-N columns (a dummy 1-tuple when the group is empty), `targetsN`
    their table indices, `wide` an int32 scratch [tables, CATEGORICAL_BLOCK_ROWS + SCRATCH_PAD].
    Rows go in cache-sized blocks: widen each column's block into `wide` (contiguous, vectorised,
    with the range check), then transpose the block into `out` eight tables at a time (the fixed
    inner width lets the compiler emit one vector store per row and group).
    Returns (table, row) of the first id outside [0, cardinality), else (-1, -1).
    """
    n, tables = out.shape
    lo = np.zeros(tables, dtype=np.int32)
    hi = np.zeros(tables, dtype=np.int32)
    grouped = tables - tables % 8
    for r0 in range(0, n, CATEGORICAL_BLOCK_ROWS):
        r1 = min(n, r0 + CATEGORICAL_BLOCK_ROWS)
        m = r1 - r0
        _widen_block(cols8, targets8, wide, r0, r1, lo, hi)
        _widen_block(cols16, targets16, wide, r0, r1, lo, hi)
        _widen_block(cols32, targets32, wide, r0, r1, lo, hi)
        for j in range(tables):
            if lo[j] < 0 or hi[j] >= cards[j]:
                for r in range(m):
                    if wide[j, r] < 0 or wide[j, r] >= cards[j]:
                        return j, r0 + r
        dst = out[r0:r1]
        for j0 in range(0, grouped, 8):
            for r in range(m):
                for q in range(8):
                    dst[r, j0 + q] = wide[j0 + q, r]
        for r in range(m):
            for j in range(grouped, tables):
                dst[r, j] = wide[j, r]
    return -1, -1
