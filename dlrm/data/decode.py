"""Compiled (numba) kernels turning raw split-binary records into the trainer's batch arrays.

Why compiled: numpy's float16 -> float32 cast (~2 ns/value) and its strided column scatter with a
cast (~1 ns/value) cost several times the raw read of the same bytes. These loops read straight
from the file mappings, convert and check in one pass and release the GIL, so the prefetch thread
overlaps the training step. Two steps numba cannot express are written as LLVM IR intrinsics: the
8x8 int32 tile transpose (vector shuffles) that turns 26 id columns into row-major [b, 26], and the
16-wide float16 -> float32 conversion (F16C / AVX-512 `vcvtph2ps`; every x86-64 CPU since 2012).
Each kernel checks its values on the fly (label in {0,1}, numericals finite, ids in
[0, cardinality)); on a failure it returns the offending position instead of raising, so the
caller can name the file, the feature and the row.

The two intrinsic kernels are only used on x86-64 CPUs with F16C (where they were built and tested:
without F16C, LLVM turns the half conversion into a runtime-library call the JIT may not resolve).
Elsewhere (older x86, aarch64, ...) `decode_half` and `decode_categorical` are plain numpy versions
with the same signature and results, chosen once at import by `select_kernels`.
"""
from __future__ import annotations

import os
import platform

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import types
from numba.core.extending import intrinsic

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
# (eight loads 4 KiB apart would all hit the same L1 cache set).
CATEGORICAL_BLOCK_ROWS = 2048
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
def compiled_decode_categorical(cols8, targets8, cols16, targets16, cols32, targets32, cards, wide, out):
    """Id columns grouped by stored dtype -> out int32 [rows, tables] (C order).

    `colsN` is a tuple of the int-N columns (a dummy 1-tuple when the group is empty), `targetsN`
    their table indices, `wide` an int32 scratch [tables, CATEGORICAL_BLOCK_ROWS + SCRATCH_PAD].
    Rows go in cache-sized blocks: widen each column's block into `wide` (contiguous, vectorised,
    with the range check), then transpose the block into `out` in 8x8 tiles (vector shuffles).
    When the table count is not a multiple of 8 the last tile overlaps the one before (it rewrites
    a few columns with the same values); fewer than 8 tables and the last rows % 8 rows of a block
    are copied one by one.
    Returns (table, row) of the first id outside [0, cardinality), else (-1, -1).
    """
    n, tables = out.shape
    lo = np.zeros(tables, dtype=np.int32)
    hi = np.zeros(tables, dtype=np.int32)
    stride = wide.shape[1]
    tile_starts = np.arange(0, tables - 7, 8)
    if tables >= 8 and tables % 8:
        tile_starts = np.append(tile_starts, tables - 8)
    tiled_tables = tables if tables >= 8 else 0
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


# ====================================================================== portable numpy versions
def numpy_decode_half(src, table_bits, out_bits):
    """`compiled_decode_half` in numpy (a table lookup per value): same arguments, same result."""
    np.take(table_bits, src, out=out_bits, mode="clip")  # uint16 indices are always in range
    bad = np.flatnonzero((src & 0x7C00) == 0x7C00)
    return int(bad[0]) if bad.size else -1


def numpy_decode_categorical(cols8, targets8, cols16, targets16, cols32, targets32, cards, wide, out):
    """`compiled_decode_categorical` in numpy: same arguments (`wide` unused), same result, and the
    same (table, row) reported first: the lowest table within the first bad row block."""
    for cols, targets in ((cols8, targets8), (cols16, targets16), (cols32, targets32)):
        for col, j in zip(cols, targets):  # an empty group's dummy column has no target: skipped
            out[:, j] = col
    rows, tables = np.nonzero((out < 0) | (out >= cards))
    if not rows.size:
        return -1, -1
    first = np.lexsort((rows, tables, rows // CATEGORICAL_BLOCK_ROWS))[0]
    return int(tables[first]), int(rows[first])


def select_kernels(machine: str, cpu_features) -> tuple:
    """(decode_half, decode_categorical) for this CPU: the compiled ones on x86-64 with F16C, else numpy."""
    # NUMBA_CPU_NAME (e.g. "generic" for portable caches) compiles for another CPU than this one's F16C.
    if machine in ("x86_64", "AMD64") and cpu_features.get("f16c", False) and not os.environ.get("NUMBA_CPU_NAME"):
        return compiled_decode_half, compiled_decode_categorical
    return numpy_decode_half, numpy_decode_categorical


decode_half, decode_categorical = select_kernels(platform.machine(), llvm.get_host_cpu_features())
