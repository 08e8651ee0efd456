"""The two vector steps of the decode that numba cannot express, written as LLVM IR intrinsics.

- `half_to_float_16`: 16 float16 values -> float32 in one F16C / AVX-512 `vcvtph2ps` (numba has no
  float16 type; a table lookup per value costs several times more).
- `transpose_8x8`: an 8x8 int32 tile transpose in vector shuffles, which turns the id columns into
  the row-major [rows, tables] batch (scalar code moves one id per load/store pair and was the
  reader's bottleneck).

Both need an x86-64 CPU with F16C (without it, LLVM turns the half conversion into a runtime-library
call the JIT may not resolve): `dlrm.data.reader.decode.select_kernels` uses them only there.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import extending, types

# Typed as Any: numba's stubs declare an intrinsic's call with the typing context as its first argument,
# which numba supplies itself (the calls in decode_numba pass the others only).
intrinsic: Any = extending.intrinsic


@intrinsic
def half_to_float_16(typingctx, src, src_offset, dst, dst_offset):
    """dst[dst_offset + k] = float32 bits of the float16 bits src[src_offset + k], k in 0..15.

    An LLVM `fpext` of a 16-wide half vector: one conversion instruction, exact for every finite value
    (subnormals and -0 included) and for infinities.
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


# shufflevector masks of an 8x8 int32 transpose: interleave 32-bit, then 64-bit, then 128-bit units
_MASKS_32 = ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])
_MASKS_64 = ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])
_MASKS_128 = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])


@intrinsic
def transpose_8x8(typingctx, src, src_offset, src_stride, dst, dst_offset, dst_stride):
    """dst[dst_offset + k*dst_stride + i] = src[src_offset + i*src_stride + k] for i, k in 0..7.

    Both arrays are C-contiguous int32; offsets and strides count elements. Emits 8 vector loads,
    24 shuffles and 8 vector stores.
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
