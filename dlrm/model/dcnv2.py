"""DCNv2 low-rank cross network (Wang et al. 2021, "DCN V2").

Layer l: x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l, with V_l: d -> r (no bias) and U_l: r -> d.
Kernels Glorot normal, cross biases zero (as TF Recommenders' `Cross` layer).
"""
from __future__ import annotations

import tensorflow as tf

from dlrm.keras2 import keras
from dlrm.model.mlp import dense_layer, layer_seed


class LowRankCrossNetwork(keras.layers.Layer):
    """x0 [B, input_dim] -> [B, input_dim] through `num_layers` low-rank cross layers."""

    def __init__(
        self, input_dim: int, num_layers: int, projection_dim: int, seed: int,
        dtype: str = "float32", name: str = "cross",
    ):
        super().__init__(name=name, dtype=dtype)
        if num_layers < 1 or projection_dim < 1:
            raise ValueError(
                f"DCNv2 needs num_cross_layers >= 1 and cross_projection_dim >= 1, got "
                f"{num_layers} and {projection_dim}"
            )
        self.input_dim = int(input_dim)
        self.down = []
        self.up = []
        for i in range(num_layers):
            down = dense_layer(projection_dim, None, layer_seed(seed, 2 * i), dtype,
                               name=f"{name}_{i}_v", use_bias=False)
            up = dense_layer(self.input_dim, None, layer_seed(seed, 2 * i + 1), dtype,
                             name=f"{name}_{i}_u", zero_bias=True)
            with tf.name_scope(f"{name}_{i}_v"):  # unique variable names
                down.build((None, self.input_dim))
            with tf.name_scope(f"{name}_{i}_u"):
                up.build((None, projection_dim))
            self.down.append(down)
            self.up.append(up)
        self.built = True

    def call(self, x0):
        x = x0
        for down, up in zip(self.down, self.up):
            x = x0 * up(down(x)) + x
        return x
