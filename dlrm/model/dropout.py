"""Dropout whose mask is a pure function of (seed, step, dataset row, layer, unit).

The trainer's invariant is that N ranks train exactly like one process on the global batch. A random
dropout mask drawn per rank would depend on how rows are split over ranks; this one is a counter-based
hash of the row's index in the dataset (and of the seed, the optimizer step, the layer and the unit),
so a row gets the same mask whichever rank holds it. The hash is 32-bit integer arithmetic in
TensorFlow ops (wrapping multiplies, shifts, xors: Chris Wellons' "lowbias32" mixer); a unit is kept
when the top 24 bits of its hash are at or above rate * 2^24.

The dropout follows a ReLU (Wide & Deep's hidden layers) and runs with it in one XLA-compiled function:
unfused, each of the hash's dozen integer ops would be a pass over a [batch, units] tensor, and a stored
mask two more (docs/benchmarks.md, the step profile). XLA's integer arithmetic is exact, so the mask is
the same bits as in plain ops. XLA compiles once per local batch size (a short last batch adds one
compilation).
"""
from __future__ import annotations

import tensorflow as tf

_GOLDEN = 0x9E3779B9


def _u32(value: int) -> tf.Tensor:
    return tf.constant(value & 0xFFFFFFFF, tf.uint32)


def _mix(x: tf.Tensor) -> tf.Tensor:
    """lowbias32: a bijective 32-bit mixer with a strong avalanche."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))
    x = x * _u32(0x7FEB352D)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(15)))
    x = x * _u32(0x846CA68B)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))


def _halves(value: tf.Tensor):
    """int64 -> (low, high) 32-bit words as uint32."""
    value = tf.cast(value, tf.int64)
    low = tf.cast(tf.bitwise.bitwise_and(value, tf.constant(0xFFFFFFFF, tf.int64)), tf.uint32)
    high = tf.cast(tf.bitwise.right_shift(value, tf.constant(32, tf.int64)), tf.uint32)
    return low, high


def keep_mask(rows: int, units: int, rate: float, seed: int, step: tf.Tensor, first_row: tf.Tensor,
              layer: int | tf.Tensor) -> tf.Tensor:
    """bool [rows, units]: which units of dataset rows first_row .. first_row + rows - 1 are kept."""
    key = _mix(_u32(seed) * _u32(_GOLDEN) + tf.cast(layer, tf.uint32))
    step_low, step_high = _halves(step)
    key = _mix(tf.bitwise.bitwise_xor(key, step_low))
    key = _mix(key + step_high * _u32(0x85EBCA6B))
    row_low, row_high = _halves(tf.cast(first_row, tf.int64) + tf.range(rows, dtype=tf.int64))
    row_keys = _mix(_mix(tf.bitwise.bitwise_xor(key, row_low)) + row_high * _u32(0xC2B2AE35))
    unit = tf.range(units, dtype=tf.int32)
    hashed = _mix(row_keys[:, None] + tf.cast(unit, tf.uint32)[None, :] * _u32(_GOLDEN))
    threshold = _u32(int(round(rate * (1 << 24))))
    return tf.bitwise.right_shift(hashed, _u32(8)) >= threshold


def _kept_scale(rate: float, dtype: tf.DType) -> tf.Tensor:
    """Inverted dropout's factor for kept units, so that a unit's expected output is unchanged."""
    return tf.cast(1.0 / (1.0 - rate), dtype)


def _relu_dropout(pre_activation: tf.Tensor, rate: float, seed: int, step: tf.Tensor, first_row: tf.Tensor,
                  layer: tf.Tensor) -> tf.Tensor:
    """ReLU, then inverted dropout with `keep_mask`'s mask: kept units scaled by 1 / (1 - rate), dropped ones 0."""
    keep = keep_mask(tf.shape(pre_activation)[0], int(pre_activation.shape[1]), rate, seed, step, first_row, layer)
    scale = _kept_scale(rate, pre_activation.dtype)
    return tf.where(keep, tf.nn.relu(pre_activation) * scale, tf.zeros([], pre_activation.dtype))


def _relu_dropout_gradient(d_output: tf.Tensor, output: tf.Tensor, rate: float) -> tf.Tensor:
    """The pre-activation's gradient: scaled where the output is > 0 (the unit is active and kept), else 0."""
    return tf.where(output > 0, d_output * _kept_scale(rate, d_output.dtype), tf.zeros([], d_output.dtype))


_compiled_relu_dropout = tf.function(_relu_dropout, jit_compile=True, autograph=False)
_compiled_relu_dropout_gradient = tf.function(_relu_dropout_gradient, jit_compile=True, autograph=False)


def relu_dropout(pre_activation: tf.Tensor, rate: float, seed: int, step: tf.Tensor, first_row: tf.Tensor,
                 layer: int) -> tf.Tensor:
    """ReLU of `pre_activation` [B, U], then inverted dropout with `keep_mask`'s mask.

    Forward and backward are one compiled pass each over [B, U]: the mask is hashed where it is used,
    never stored, and the gradient needs only the output (a unit passes its gradient, scaled, where its
    output is > 0: active and kept), not the mask nor the separate ReLU gradient.
    """
    if rate <= 0.0:
        return tf.nn.relu(pre_activation)

    @tf.autograph.experimental.do_not_convert  # autograph would rewrite the returned gradient function
    @tf.custom_gradient
    def apply(z):
        # the layer as a tensor: layers of one shape share one compilation
        output = _compiled_relu_dropout(z, rate, seed, step, first_row, tf.constant(layer, tf.int32))
        return output, lambda d_output: _compiled_relu_dropout_gradient(d_output, output, rate)

    return apply(pre_activation)
