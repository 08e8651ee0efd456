"""A stack of dense layers with the reference DLRM initialisation.

Reference (facebookresearch/dlrm, NVIDIA's TF2 DLRM): kernels Glorot normal
(std = sqrt(2 / (fan_in + fan_out))), biases normal with std = sqrt(1 / fan_out). Every layer gets
its own seed derived from the model seed, so two models built with the same seed are identical.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import tensorflow as tf

from dlrm.keras2 import keras


def layer_seed(model_seed: int, layer_key: int) -> int:
    """A distinct, reproducible 31-bit initializer seed per layer."""
    return (int(model_seed) * 1_000_003 + int(layer_key) * 7_919 + 12_345) % (2**31 - 1)


def dense_layer(
    units: int, activation, seed: int, dtype: str, name: str, use_bias: bool = True,
    zero_bias: bool = False,
) -> keras.layers.Dense:
    """A Dense layer with a Glorot-normal kernel and (by default) the reference N(0, 1/units) bias."""
    bias_init = (
        keras.initializers.Zeros()
        if zero_bias
        else keras.initializers.RandomNormal(stddev=math.sqrt(1.0 / units), seed=seed + 1)
    )
    return keras.layers.Dense(
        units,
        activation=activation,
        use_bias=use_bias,
        kernel_initializer=keras.initializers.GlorotNormal(seed=seed),
        bias_initializer=bias_init,
        dtype=dtype,
        name=name,
    )


def _copy_transposed(kernel: tf.Tensor) -> tf.Tensor:
    """kernel^T as a tensor of its own. Grappler folds a plain 2-D transpose feeding a matmul back
    into `transpose_b`; a rank-3 transpose followed by a reshape it leaves as a copy."""
    rows, cols = kernel.shape
    return tf.reshape(tf.transpose(kernel[None], [0, 2, 1]), [cols, rows])


@tf.autograph.experimental.do_not_convert  # autograph would rewrite the returned gradient function
@tf.custom_gradient
def matmul(x: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """x @ kernel, whose input gradient multiplies by a transposed copy of the kernel.

    Why: autodiff computes dx = dy @ kernel^T with oneDNN's `transpose_b`, which runs at ~75% of
    GEMM speed for a wide-in, narrow-out shape such as DLRM's first top layer
    ([8192, 1024] x [1024, 479]^T: 52 ms instead of 39 ms on 2 cores). Copying the kernel
    transposed costs well under a millisecond and gives the plain GEMM speed.
    """
    def gradient(d_output):
        return (tf.matmul(d_output, _copy_transposed(kernel)),
                tf.matmul(x, d_output, transpose_a=True))

    return tf.matmul(x, kernel), gradient


@tf.autograph.experimental.do_not_convert
@tf.custom_gradient
def bias_add(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """x + bias, whose bias gradient sums the rows of the output gradient as one [1, B] x [B, N] matmul.

    Why: TensorFlow's BiasAddGrad kernel sums bfloat16 about 2x slower than the GEMM computes the same
    sum at 1024-wide layers, and float32 no faster (benchmarks/results/train_step_ab_2026-11-29_bias_gradient.md).
    """
    def gradient(d_output):
        ones = tf.ones([1, tf.shape(d_output)[0]], d_output.dtype)
        return d_output, tf.reshape(tf.matmul(ones, d_output), [-1])

    return tf.nn.bias_add(x, bias), gradient


class MLP(keras.layers.Layer):
    """input [B, input_dim] -> [B, units[-1]]; ReLU after every layer except (optionally) the last.

    Built eagerly in the constructor, so all variables exist before any `tf.function` runs.
    """

    def __init__(
        self,
        input_dim: int,
        units: Sequence[int],
        relu_last: bool,
        seed: int,
        dtype: str = "float32",
        name: str = "mlp",
        zero_bias: bool = False,
    ):
        super().__init__(name=name, dtype=dtype)
        if not units:
            raise ValueError(f"{name}: needs at least one layer")
        self.units = [int(u) for u in units]
        self.dense_layers = []
        fan_in = int(input_dim)
        for i, width in enumerate(self.units):
            last = i == len(self.units) - 1
            activation = None if (last and not relu_last) else "relu"
            layer = dense_layer(width, activation, layer_seed(seed, i), dtype, name=f"{name}_{i}", zero_bias=zero_bias)
            with tf.name_scope(f"{name}_{i}"):  # unique variable names, e.g. top_mlp_0/kernel:0
                layer.build((None, fan_in))
            self.dense_layers.append(layer)
            fan_in = width
        self.built = True

    @property
    def output_dim(self) -> int:
        return self.units[-1]

    def call(self, x, hidden_activation: Optional[Callable] = None):
        """`hidden_activation(z, i)`, if given, replaces the ReLU of every layer i but the last, given the
        layer's pre-activation z (Wide & Deep: ReLU and dropout in one pass)."""
        # The Dense layers hold the variables; the arithmetic is spelled out here so the matmul
        # can carry the faster input gradient.
        for i, layer in enumerate(self.dense_layers):
            kernel = tf.cast(tf.convert_to_tensor(layer.kernel), x.dtype)
            pre_activation = bias_add(matmul(x, kernel), tf.cast(layer.bias, x.dtype))
            hidden = i < len(self.dense_layers) - 1
            x = (hidden_activation(pre_activation, i) if hidden and hidden_activation is not None
                 else layer.activation(pre_activation))
        return x
