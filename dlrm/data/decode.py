"""Compiled (numba) kernels turning raw split-binary records into the trainer's batch arrays.

Why compiled: numpy's float16 -> float32 cast (~2 ns/value) and its strided column scatter with a
cast (~1 ns/value) cost several times the raw read of the same bytes. These loops read straight
from the file mappings, convert and check in one pass and release the GIL, so the prefetch threads
overlap the training step. Two steps numba cannot express are written as LLVM IR intrinsics: the
8x8 int32 tile transpose (vector shuffles) that turns 26 id columns into row-major [b, 26], and the
16-wide float16 -> float32 conversion (F16C / AVX-512 `vcvtph2ps`; every x86-64 CPU since 2012).
Each kernel checks its values on the fly (label in {0,1}, numericals finite, ids in
[0, cardinality)); on a failure it returns the offending position instead of raising, so the
caller can name the file, the feature and the row.

`decode_rows` is the one entry point: it decodes a batch's rows, split into `parts` row ranges that
run on numba's threads (one parallel region per batch: Python threads handing chunks to each other
cost more than the decode itself), and reports the earliest bad row of the batch whatever the
split, so the error does not depend on the thread count.

The two intrinsic kernels are only used on x86-64 CPUs with F16C (where they were built and tested:
without F16C, LLVM turns the half conversion into a runtime-library call the JIT may not resolve).
Elsewhere (older x86, aarch64, ...) `decode_rows` is a plain numpy version with the same signature
and results, chosen once at import by `select_kernels`.
"""
from __future__ import annotations

import os
import platform
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic, overload

# float16 bit pattern -> float32 bit pattern; exact by construction (numpy's own cast). Used for the
# few values after the last whole 16-value vector; the rest goes through the CPU's conversion.
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


@intrinsic
def _half_to_float_16(typingctx, src, src_offset, dst, dst_offset):
    """dst[dst_offset + k] = float32 bits of the float16 bits src[src_offset + k], k in 0..15.

    An LLVM `fpext` of a 16-wide half vector: one F16C/AVX-512 conversion instruction, exact for
    every value (subnormals, inf and NaN included), where numba has no float16 type.
    """
    signature = types.void(src, types.intp, dst, types.intp)

    def codegen(context, builder, sig, args):
        src_data = context.make_array(sig.args[0])(context, builder, args[0]).data
        dst_data = context.make_array(sig.args[2])(context, builder, args[2]).data
        halves = ir.VectorType(ir.HalfType(), 16)
        floats = ir.VectorType(ir.FloatType(), 16)
        source = builder.bitcast(builder.gep(src_data, [args[1]]), halves.as_pointer())
        target = builder.bitcast(builder.gep(dst_data, [args[3]]), floats.as_pointer())
        builder.store(builder.fpext(builder.load(source, align=2), floats), target, align=4)
        return context.get_dummy_value()

    return signature, codegen


@numba.njit(nogil=True, cache=True)
def compiled_decode_half(src, table_bits, out_bits):
    """float16 bit patterns (flat uint16) -> float32 bit patterns (flat uint32 view of the output).

    16 values at a time with the CPU's half->float conversion, the tail through `table_bits`;
    the inf/NaN check (exponent bits all set) runs in the same loop. Returns the first index
    holding inf/NaN, else -1.
    """
    n = src.shape[0]
    vectorised = n - n % 16
    n_special = 0
    for c0 in range(0, vectorised, 4096):  # chunks: the check re-reads the source from L1
        c1 = min(vectorised, c0 + 4096)
        for i in range(c0, c1, 16):
            _half_to_float_16(src, i, out_bits, i)
        chunk = src[c0:c1]
        for i in range(chunk.shape[0]):
            n_special += (chunk[i] & 0x7C00) == 0x7C00
    for i in range(vectorised, n):
        out_bits[i] = table_bits[src[i]]
        n_special += (src[i] & 0x7C00) == 0x7C00
    if n_special:
        for i in range(n):
            if (src[i] & 0x7C00) == 0x7C00:
                return i
    return -1


@numba.njit(nogil=True, cache=True)
def decode_single(src, out_bits):
    """float32 bit patterns -> the same bits (a copy); returns the first inf/NaN index, else -1."""
    n_special = 0
    for i in range(src.shape[0]):
        v = src[i]
        out_bits[i] = v
        n_special += (v & 0x7F800000) == 0x7F800000
    if n_special:
        for i in range(src.shape[0]):
            if (src[i] & 0x7F800000) == 0x7F800000:
                return i
    return -1


def decode_numerical(src, table_bits, out_bits):
    """float16 (uint16 bits) or float32 (uint32 bits) -> float32 bits, for compiled callers:
    `compiled_decode_half` or `decode_single`, picked by the source's width when compiled (numba
    cannot branch on a dtype at run time). From Python, call those two directly."""
    raise NotImplementedError("decode_numerical exists only inside compiled kernels")


@overload(decode_numerical, jit_options={"nogil": True})
def _decode_numerical_compiled(src, table_bits, out_bits):
    if src.dtype.bitwidth == 16:
        return lambda src, table_bits, out_bits: compiled_decode_half(src, table_bits, out_bits)
    return lambda src, table_bits, out_bits: decode_single(src, out_bits)


# Rows per block of the categorical kernel. Longer blocks read each id file in longer sequential
# runs; shorter ones keep the scratch (tables x rows int32: 426 KB for 26 tables at 4,096 rows) in
# L2 for the transpose. Measured on the loader benchmark, 2 MB L2 per core, same-process A/B:
# 4,096 rows 1.11-1.16x faster than 16,384 at prefetch 4 (2 threads) and 1.18-1.20x inline; 2,048
# and 8,192 within 5% of 4,096. (An AMD EPYC VM with a 32 MB L3 preferred 16,384 to 2,048 by
# 1.09-1.22x; 4,096 was not measured there.) The scratch rows are padded so their stride is not a multiple of
# 4 KiB (eight loads 4 KiB apart would all hit the same L1 cache set).
CATEGORICAL_BLOCK_ROWS = 4096
SCRATCH_PAD = 16

# shufflevector masks of an 8x8 int32 transpose: interleave 32-bit, then 64-bit, then 128-bit units
_MASKS_32 = ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])
_MASKS_64 = ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])
_MASKS_128 = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])


@intrinsic
def _transpose_8x8(typingctx, src, src_offset, src_stride, dst, dst_offset, dst_stride):
    """dst[dst_offset + k*dst_stride + i] = src[src_offset + i*src_stride + k] for i, k in 0..7.

    Both arrays are C-contiguous int32; offsets and strides count elements. Numba cannot express
    vector shuffles, and scalar code moves one id per load/store pair (the transpose was the
    reader's bottleneck), so this emits the 8 vector loads, 24 shuffles and 8 vector stores as LLVM IR.
    """
    signature = types.void(src, types.intp, types.intp, dst, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        src_data = context.make_array(sig.args[0])(context, builder, args[0]).data
        dst_data = context.make_array(sig.args[3])(context, builder, args[3]).data
        src_offset, src_stride, dst_offset, dst_stride = args[1], args[2], args[4], args[5]
        vector = ir.VectorType(ir.IntType(32), 8)
        index = ir.IntType(64)

        def row_pointer(data, offset, stride, k):
            element = builder.gep(data, [builder.add(offset, builder.mul(stride, ir.Constant(index, k)))])
            return builder.bitcast(element, vector.as_pointer())

        def interleave(rows, masks, pairs):
            out = []
            for a, b in pairs:
                out += [builder.shuffle_vector(rows[a], rows[b], ir.Constant(vector, m)) for m in masks]
            return out

        rows = [builder.load(row_pointer(src_data, src_offset, src_stride, k), align=4) for k in range(8)]
        rows = interleave(rows, _MASKS_32, [(0, 1), (2, 3), (4, 5), (6, 7)])
        rows = interleave(rows, _MASKS_64, [(0, 2), (1, 3), (4, 6), (5, 7)])
        lo_hi = interleave(rows, _MASKS_128, [(0, 4), (1, 5), (2, 6), (3, 7)])
        columns = lo_hi[0::2] + lo_hi[1::2]
        for k in range(8):
            builder.store(columns[k], row_pointer(dst_data, dst_offset, dst_stride, k), align=4)
        return context.get_dummy_value()

    return signature, codegen


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
def compiled_decode_categorical(cols8, targets8, cols16, targets16, cols32, targets32, cards, first, wide, out):
    """Rows first .. first + len(out) of the id columns, grouped by stored dtype -> out int32
    [rows, tables] (C order).

    `colsN` is a tuple of the int-N columns (a dummy 1-tuple when the group is empty), `targetsN`
    their table indices, `wide` an int32 scratch [tables, block rows + SCRATCH_PAD] (see `new_scratch`).
    Rows go in cache-sized blocks: widen each column's block into `wide` (contiguous, vectorised,
    with the range check), then transpose the block into `out` in 8x8 tiles (vector shuffles).
    When the table count is not a multiple of 8 the last tile overlaps the one before (it rewrites
    a few columns with the same values); fewer than 8 tables and the last rows % 8 rows of a block
    are copied one by one.
    Returns (table, row of out) of the first id outside [0, cardinality) in row-major order (the
    earliest row, its lowest table), else (-1, -1).
    """
    n, tables = out.shape
    lo = np.zeros(tables, dtype=np.int32)
    hi = np.zeros(tables, dtype=np.int32)
    stride = wide.shape[1]
    tile_starts = np.arange(0, tables - 7, 8)
    if tables >= 8 and tables % 8:
        tile_starts = np.append(tile_starts, tables - 8)
    tiled_tables = tables if tables >= 8 else 0
    block_rows = stride - SCRATCH_PAD  # the scratch sets the block size
    for r0 in range(0, n, block_rows):
        r1 = min(n, r0 + block_rows)
        m = r1 - r0
        _widen_block(cols8, targets8, wide, first + r0, first + r1, lo, hi)
        _widen_block(cols16, targets16, wide, first + r0, first + r1, lo, hi)
        _widen_block(cols32, targets32, wide, first + r0, first + r1, lo, hi)
        bad_table, bad_row = -1, m
        for j in range(tables):
            if lo[j] < 0 or hi[j] >= cards[j]:
                for r in range(bad_row):  # only rows before the earliest found so far
                    if wide[j, r] < 0 or wide[j, r] >= cards[j]:
                        bad_table, bad_row = j, r
                        break
        if bad_table >= 0:
            return bad_table, r0 + bad_row
        tiled_rows = m - m % 8
        for r in range(0, tiled_rows, 8):
            for j0 in tile_starts:
                _transpose_8x8(wide, j0 * stride + r, stride, out, (r0 + r) * tables + j0, tables)
        block = out[r0:r1]
        for r in range(tiled_rows, m):
            for j in range(tiled_tables):
                block[r, j] = wide[j, r]
        for r in range(m):
            for j in range(tiled_tables, tables):
                block[r, j] = wide[j, r]
    return -1, -1


# Several decode threads run in numba's thread pool. Its fallback "workqueue" layer aborts the process
# when two threads launch kernels at once (e.g. a training and an evaluation reader prefetching), so
# unless the user chose a layer, ask for a thread-safe one: TBB or OpenMP (libgomp).
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "threadsafe"
_threading_layer_checked = False


@numba.njit(parallel=True, cache=True)
def _probe_threads(out):
    for i in numba.prange(out.shape[0]):
        out[i] = i


def check_threading_layer() -> None:
    """Start numba's thread pool once; a clear error if no thread-safe layer loads."""
    global _threading_layer_checked
    if _threading_layer_checked:
        return
    try:
        _probe_threads(np.empty(2, np.int64))
    except ValueError as error:  # numba: "No threading layer could be loaded"
        raise RuntimeError("decoding a batch on several threads needs numba's OpenMP or TBB threading layer "
                           "(Debian: apt-get install libgomp1); use one decode thread otherwise") from error
    if numba.threading_layer() == "workqueue":
        raise RuntimeError("numba's workqueue threading layer is not thread-safe (NUMBA_THREADING_LAYER=workqueue): "
                           "use omp or tbb, or one decode thread")
    _threading_layer_checked = True


# What a decode reports first when several values are bad in the same row.
LABEL, NUMERICAL, CATEGORICAL = 0, 1, 2
NO_ERROR = (-1, -1, -1)


@numba.njit(nogil=True, cache=True)
def compiled_decode_part(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32,
                         cards, table_bits, first, lo, hi, wide, out_label, out_numerical_bits, out_categorical):
    """Batch rows [lo, hi) (file rows first + lo .. first + hi) into the batch's output arrays.

    `numerical_src` holds the float bit patterns (uint16 for float16 files, uint32 for float32),
    `out_numerical_bits` is the flat uint32 view of the float32 output. Returns (kind, column,
    batch row) of the earliest bad value (kinds LABEL < NUMERICAL < CATEGORICAL within a row),
    else NO_ERROR.
    """
    kind, column, row = -1, -1, hi
    bad = decode_label(label_src[first + lo:first + hi], out_label[lo:hi])
    if bad >= 0:
        kind, column, row = LABEL, 0, lo + bad
    if width:
        bad = decode_numerical(numerical_src[(first + lo) * width:(first + hi) * width], table_bits,
                               out_numerical_bits[lo * width:hi * width])
        if bad >= 0 and lo + bad // width < row:
            kind, column, row = NUMERICAL, bad % width, lo + bad // width
    if out_categorical.shape[1]:
        table, bad = compiled_decode_categorical(cols8, targets8, cols16, targets16, cols32, targets32, cards,
                                                 first + lo, wide, out_categorical[lo:hi])
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
def compiled_decode_parts(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32,
                          cards, table_bits, first, wides, out_label, out_numerical_bits, out_categorical, status):
    """`compiled_decode_part` on len(status) row ranges in parallel; status[p] = part p's result."""
    parts = status.shape[0]
    rows = out_label.shape[0]
    for p in numba.prange(parts):
        lo, hi = part_bounds(rows, parts, p)
        kind, column, row = compiled_decode_part(label_src, numerical_src, width, cols8, targets8, cols16, targets16,
                                                 cols32, targets32, cards, table_bits, first, lo, hi, wides[p],
                                                 out_label, out_numerical_bits, out_categorical)
        status[p, 0] = kind
        status[p, 1] = column
        status[p, 2] = row


def earliest(results) -> tuple[int, int, int]:
    """The (kind, column, row) with the lowest row (then kind) among parts' results, else NO_ERROR."""
    bad = [tuple(int(v) for v in result) for result in results if result[0] >= 0]
    return min(bad, key=lambda r: (r[2], r[0])) if bad else NO_ERROR


def compiled_decode_rows(sources: tuple, first: int, parts: int, wides: np.ndarray, out_label: np.ndarray,
                         out_numerical_bits: np.ndarray, out_categorical: np.ndarray) -> tuple[int, int, int]:
    """Decode len(out_label) rows from file row `first`, in `parts` row ranges on numba's threads.

    `sources` is `RowSources`' fields in order; `wides` a scratch [parts, tables, stride] (see
    `compiled_decode_categorical`). Returns (kind, column, batch row) of the earliest bad value,
    else NO_ERROR. One part runs on the calling thread, with no thread pool involved.
    """
    if parts == 1:
        return compiled_decode_part(*sources, first, 0, out_label.shape[0], wides[0], out_label,
                                    out_numerical_bits, out_categorical)
    check_threading_layer()
    numba.set_num_threads(min(parts, numba.config.NUMBA_NUM_THREADS))  # this thread's launches only
    status = np.empty((parts, 3), dtype=np.int64)
    compiled_decode_parts(*sources, first, wides, out_label, out_numerical_bits, out_categorical, status)
    return earliest(status)


# ====================================================================== value checks without decoding
# Rows per block of the start-up value check (`check_rows`): blocks are the unit of work of its
# threads; each block's columns are read once, front to back.
CHECK_BLOCK_ROWS = 1 << 16


def _exponent_bits(src):
    """The all-ones exponent (inf/NaN) of a float bit pattern array's width, for compiled callers."""
    raise NotImplementedError("_exponent_bits exists only inside compiled kernels")


@overload(_exponent_bits, jit_options={"nogil": True})
def _exponent_bits_compiled(src):
    if src.dtype.bitwidth == 16:
        return lambda src: np.uint16(0x7C00)
    return lambda src: np.uint32(0x7F800000)


@numba.njit(nogil=True, cache=True, inline="always")
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
def check_block(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32, cards,
                lo, hi):
    """Check file rows [lo, hi) without decoding them: (kind, column, row) of the earliest bad value
    (kinds LABEL < NUMERICAL < CATEGORICAL within a row, as `compiled_decode_part`) or NO_ERROR, and
    the number of positive labels."""
    labels = label_src[lo:hi]
    label_bits = np.uint8(0)
    positives = 0
    for r in range(labels.shape[0]):
        label_bits |= labels[r]
        positives += labels[r]
    kind, column, row = -1, -1, hi
    if label_bits > 1:
        for r in range(labels.shape[0]):
            if labels[r] > 1:
                kind, column, row = LABEL, 0, lo + r
                break
    if width:
        values = numerical_src[lo * width:hi * width]
        special = _exponent_bits(values)
        any_special = False
        for i in range(values.shape[0]):
            any_special |= (values[i] & special) == special
        if any_special:
            for i in range(min(values.shape[0], (row - lo + 1) * width)):
                if (values[i] & special) == special:
                    if lo + i // width < row:
                        kind, column, row = NUMERICAL, i % width, lo + i // width
                    break
    if cards.shape[0]:
        id_row, table = hi, cards.shape[0]
        id_row, table = _first_bad_id(cols8, targets8, cards, lo, hi, id_row, table)
        id_row, table = _first_bad_id(cols16, targets16, cards, lo, hi, id_row, table)
        id_row, table = _first_bad_id(cols32, targets32, cards, lo, hi, id_row, table)
        if id_row < row:
            kind, column, row = CATEGORICAL, table, id_row
    if kind < 0:
        row = -1
    return kind, column, row, positives


@numba.njit(nogil=True, cache=True, inline="always")
def _check_one_block(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32, cards,
                     begin, end, block_rows, block, status, positives):
    lo = begin + block * block_rows
    hi = min(end, lo + block_rows)
    kind, column, row, count = check_block(label_src, numerical_src, width, cols8, targets8, cols16, targets16,
                                           cols32, targets32, cards, lo, hi)
    status[block, 0] = kind
    status[block, 1] = column
    status[block, 2] = row
    positives[block] = count


@numba.njit(nogil=True, cache=True)
def _check_blocks_serial(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32,
                         cards, table_bits, begin, end, block_rows, status, positives):
    for block in range(status.shape[0]):
        _check_one_block(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32,
                         cards, begin, end, block_rows, block, status, positives)


@numba.njit(nogil=True, cache=True, parallel=True)
def _check_blocks_parallel(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32,
                           cards, table_bits, begin, end, block_rows, status, positives):
    for block in numba.prange(status.shape[0]):
        _check_one_block(label_src, numerical_src, width, cols8, targets8, cols16, targets16, cols32, targets32,
                         cards, begin, end, block_rows, block, status, positives)


def check_rows(sources: tuple, begin: int, end: int, threads: int = 1,
               block_rows: int = CHECK_BLOCK_ROWS) -> tuple[int, tuple[int, int, int]]:
    """Check file rows [begin, end) of a mapping (`RowSources`) in blocks of `block_rows`, on `threads`
    of numba's threads, without decoding them. Returns (positive labels, (kind, column, file row) of
    the earliest bad value or NO_ERROR); the result depends on neither the threads nor the blocks."""
    blocks = -(-(end - begin) // block_rows)
    status = np.empty((blocks, 3), dtype=np.int64)
    positives = np.empty(blocks, dtype=np.int64)
    if threads > 1 and blocks > 1:
        check_threading_layer()
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        _check_blocks_parallel(*sources, begin, end, block_rows, status, positives)
    else:
        _check_blocks_serial(*sources, begin, end, block_rows, status, positives)
    bad = np.flatnonzero(status[:, 0] >= 0)  # blocks are in row order: the first bad block holds the earliest row
    first = tuple(int(v) for v in status[bad[0]]) if bad.size else NO_ERROR
    return int(positives.sum()), first


# ====================================================================== portable numpy versions
def numpy_decode_numerical(src, table_bits, out_bits):
    """`decode_numerical` in numpy (a table lookup per float16 value): same arguments, same result."""
    if src.dtype.itemsize == 2:
        np.take(table_bits, src, out=out_bits, mode="clip")  # uint16 indices are always in range
        bad = np.flatnonzero((src & 0x7C00) == 0x7C00)
    else:
        out_bits[:] = src
        bad = np.flatnonzero((src & 0x7F800000) == 0x7F800000)
    return int(bad[0]) if bad.size else -1


def numpy_decode_categorical(cols8, targets8, cols16, targets16, cols32, targets32, cards, first, wide, out):
    """`compiled_decode_categorical` in numpy: same arguments (`wide` unused), same result."""
    rows = slice(first, first + out.shape[0])
    for cols, targets in ((cols8, targets8), (cols16, targets16), (cols32, targets32)):
        for col, j in zip(cols, targets):  # an empty group's dummy column has no target: skipped
            out[:, j] = col[rows]
    bad_rows, bad_tables = np.nonzero((out < 0) | (out >= cards))  # row-major: earliest row, lowest table
    return (int(bad_tables[0]), int(bad_rows[0])) if bad_rows.size else (-1, -1)


def numpy_decode_rows(sources: tuple, first: int, parts: int, wides, out_label: np.ndarray,
                      out_numerical_bits: np.ndarray, out_categorical: np.ndarray) -> tuple[int, int, int]:
    """`compiled_decode_rows` in numpy, on the calling thread (`parts` and `wides` unused): same result."""
    n, width = out_label.shape[0], sources.width
    label = sources.label_src[first:first + n]
    out_label[:] = label
    results = []
    bad = np.flatnonzero(label > 1)
    if bad.size:
        results.append((LABEL, 0, int(bad[0])))
    if width:
        bad = numpy_decode_numerical(sources.numerical_src[first * width:(first + n) * width], sources.table_bits,
                                     out_numerical_bits)
        if bad >= 0:
            results.append((NUMERICAL, bad % width, bad // width))
    if out_categorical.shape[1]:
        table, row = numpy_decode_categorical(sources.cols8, sources.targets8, sources.cols16, sources.targets16,
                                              sources.cols32, sources.targets32, sources.cards, first, None,
                                              out_categorical)
        if table >= 0:
            results.append((CATEGORICAL, table, row))
    return earliest(results)


# ====================================================================== choosing and feeding the kernels
class RowSources(NamedTuple):
    """A mapping's file arrays in the order the row kernels take them (built once per reader)."""

    label_src: np.ndarray  # uint8 [rows]
    numerical_src: np.ndarray  # uint16 (float16 files) or uint32 (float32 files) bits [rows * width]
    width: int  # numerical features per row
    cols8: tuple  # int8 id columns (a dummy empty one when there are none); then their table indices
    targets8: np.ndarray
    cols16: tuple
    targets16: np.ndarray
    cols32: tuple
    targets32: np.ndarray
    cards: np.ndarray  # int64 cardinality per table
    table_bits: np.ndarray  # HALF_TO_FLOAT_BITS


def empty_mapping(dtype) -> np.ndarray:
    """Empty array typed like a read-only mapping (so the kernels see one array type)."""
    empty = np.empty(0, dtype=dtype)
    empty.setflags(write=False)
    return empty


def row_sources(label: np.ndarray, numerical: np.ndarray | None, width: int, columns: list[np.ndarray],
                cardinalities) -> RowSources:
    """Group a mapping's arrays for the kernels: float bits for the numericals (an empty uint16 array
    when there are none), the id columns by stored dtype (the kernels take one tuple per dtype)."""
    if numerical is None:
        numerical = empty_mapping(np.uint16)
    numerical = numerical.view(np.uint16 if numerical.dtype.itemsize == 2 else np.uint32)
    groups = []
    for dtype in (np.int8, np.int16, np.int32):
        targets = [j for j, col in enumerate(columns) if col.dtype == dtype]
        groups += [tuple(columns[j] for j in targets) or (empty_mapping(dtype),), np.asarray(targets, np.int64)]
    return RowSources(label.view(np.uint8), numerical, width, *groups, np.asarray(cardinalities, np.int64),
                      HALF_TO_FLOAT_BITS)


def new_scratch(parts: int, tables: int, block_rows: int = CATEGORICAL_BLOCK_ROWS) -> np.ndarray:
    """Scratch for `decode_rows`: [parts, tables, block rows + pad] int32 (one block per part)."""
    return np.empty((parts, tables, block_rows + SCRATCH_PAD), dtype=np.int32)


def select_kernels(machine: str, cpu_features):
    """`decode_rows` for this CPU: the compiled one on x86-64 with F16C, else the numpy one."""
    # NUMBA_CPU_NAME (e.g. "generic" for portable caches) compiles for another CPU than this one's F16C.
    if machine in ("x86_64", "AMD64") and cpu_features.get("f16c", False) and not os.environ.get("NUMBA_CPU_NAME"):
        return compiled_decode_rows
    return numpy_decode_rows


decode_rows = select_kernels(platform.machine(), llvm.get_host_cpu_features())
