"""DLRM dot interaction: pairwise dot products of the bottom-MLP output and the embedding vectors.

With F = 1 + num_tables feature vectors of width D, the output is the bottom-MLP output followed by
the strict lower triangle of the F x F Gram matrix in row-major order ((1,0), (2,0), (2,1), ...),
as in the reference implementations: D + F(F-1)/2 values (128 + 351 = 479 by default).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def dot_interaction_output_dim(num_tables: int, dim: int) -> int:
    num_features = num_tables + 1
    return dim + num_features * (num_features - 1) // 2


def lower_triangle_indices(num_features: int) -> np.ndarray:
    """Flat indices i * F + j of the strict lower triangle (i > j), row-major."""
    return np.array(
        [i * num_features + j for i in range(num_features) for j in range(i)], dtype=np.int32
    )


def dot_interaction(bottom: tf.Tensor, embedded: tf.Tensor) -> tf.Tensor:
    """bottom [B, D], embedded [B, T, D] -> [B, D + (T+1)T/2] (same dtype as the inputs)."""
    num_features = int(embedded.shape[1]) + 1
    features = tf.concat([tf.expand_dims(bottom, 1), embedded], axis=1)  # [B, F, D]
    gram = tf.matmul(features, features, transpose_b=True)  # [B, F, F]
    flat = tf.reshape(gram, [-1, num_features * num_features])
    lower = tf.gather(flat, lower_triangle_indices(num_features), axis=1)
    return tf.concat([bottom, lower], axis=1)
