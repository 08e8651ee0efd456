"""DLRM dot interaction: pairwise dot products of the bottom-MLP output and the embedding vectors.

With F = 1 + num_tables feature vectors of width D, the output is the bottom-MLP output followed by
the strict lower triangle of the F x F Gram matrix in row-major order ((1,0), (2,0), (2,1), ...),
as in the reference implementations: D + F(F-1)/2 values (128 + 351 = 479 by default). A dataset
without numerical features has no bottom MLP: `embedding_dot_interaction` gives the lower triangle
of the embeddings' own Gram matrix (F = num_tables), nothing else.

The embeddings arrive as the column blocks the embedding layer returns (`lookup_blocks`: one per table
in one process, one for all tables after the all-to-all), already in the compute dtype; the interaction
stacks them with the bottom vector in one copy, so no float32 concatenation of all tables is made, cast
and copied again, and the gradient is cut back into the blocks in the compute dtype.

Both interactions carry their own gradient. Autodiff of `features @ features^T` runs two batched
matmuls and adds them; the Gram matrix is symmetric, so d features = (dG + dG^T) @ features is one
batched matmul (split as row 0 and rows 1.. so neither input gradient needs slicing out), and a
row gather builds dG + dG^T straight from the output gradient.
`reference_dot_interaction` is the plain autodiff formulation: the tests check the two agree.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np
import tensorflow as tf

NAME_SCOPE = "dot_interaction"  # of its ops, forward and (with "_gradient") backward: what step profiles group by
GRADIENT_SCOPE = NAME_SCOPE + "_gradient"


def dot_interaction_output_dim(num_tables: int, dim: int, with_bottom: bool = True) -> int:
    """Width of the interaction output; `with_bottom=False`: no bottom MLP (no numerical features)."""
    num_features = num_tables + int(with_bottom)
    return int(with_bottom) * dim + num_features * (num_features - 1) // 2


def lower_triangle_indices(num_features: int) -> np.ndarray:
    """Flat indices i * F + j of the strict lower triangle (i > j), row-major."""
    return np.array(
        [i * num_features + j for i in range(num_features) for j in range(i)], dtype=np.int32
    )


def symmetric_gradient_indices(num_features: int) -> np.ndarray:
    """For each flat (i, j) of the F x F Gram matrix: 1 + k where pair k is (i, j) or (j, i), else 0.

    Gathering these from [0, d_pair_0, d_pair_1, ...] gives dG + dG^T (zero diagonal).
    """
    index = np.zeros(num_features * num_features, dtype=np.int32)
    for pair, flat in enumerate(lower_triangle_indices(num_features)):
        i, j = divmod(int(flat), num_features)
        index[i * num_features + j] = index[j * num_features + i] = pair + 1
    return index


def _features(bottom: tf.Tensor, embedded: tf.Tensor) -> tf.Tensor:
    return tf.concat([tf.expand_dims(bottom, 1), embedded], axis=1)  # [B, F, D]


def _lower_triangle(features: tf.Tensor) -> tf.Tensor:
    num_features = int(features.shape[1])
    gram = tf.matmul(features, features, transpose_b=True)  # [B, F, F]
    flat = tf.reshape(gram, [-1, num_features * num_features])
    return tf.gather(flat, lower_triangle_indices(num_features), axis=1)


def reference_dot_interaction(bottom: tf.Tensor, embedded: tf.Tensor) -> tf.Tensor:
    """The plain formulation, differentiated by autodiff (what a straightforward Keras model does)."""
    return tf.concat([bottom, _lower_triangle(_features(bottom, embedded))], axis=1)


def reference_embedding_dot_interaction(embedded: tf.Tensor) -> tf.Tensor:
    """The plain formulation of `embedding_dot_interaction`, differentiated by autodiff."""
    return _lower_triangle(embedded)


def _gram_gradient_rows(d_pairs: tf.Tensor, features: tf.Tensor, rows: slice) -> tf.Tensor:
    """Rows `rows` of (dG + dG^T) @ features [B, F, D], from the pairs' output gradient d_pairs [B, P].

    Pair-major [P, B] layout: the gather then copies whole rows, several times faster than gathering
    single elements along axis 1. Only the asked-for rows are computed (no slicing of a [B, F, D] result).
    """
    num_features = int(features.shape[1])
    transposed = tf.transpose(d_pairs)
    padded = tf.concat([tf.zeros_like(transposed[:1]), transposed], axis=0)
    index = symmetric_gradient_indices(num_features).reshape(num_features, num_features)[rows]
    d_gram = tf.transpose(tf.gather(padded, index.reshape(-1)))
    return tf.matmul(tf.reshape(d_gram, [-1, len(index), num_features]), features)


def _block_features(leading: Sequence[tf.Tensor], blocks: Sequence[tf.Tensor], dim: int) -> tf.Tensor:
    """[B, F, D] from optional `leading` [B, D] (the bottom MLP's output) and blocks [B, k * D]: one copy."""
    views = [tf.expand_dims(vector, 1) for vector in leading]
    views += [tf.reshape(block, [-1, int(block.shape[1]) // dim, dim]) for block in blocks]
    return views[0] if len(views) == 1 else tf.concat(views, axis=1)


def _block_gradients(d_vectors: tf.Tensor, blocks: Sequence[tf.Tensor]) -> List[tf.Tensor]:
    """d_vectors [B, T, D] cut back into the blocks' shapes [B, k * D]."""
    dim = int(d_vectors.shape[2])
    counts = [int(block.shape[1]) // dim for block in blocks]
    pieces = tf.split(d_vectors, counts, axis=1) if len(blocks) > 1 else [d_vectors]
    return [tf.reshape(piece, [-1, count * dim]) for piece, count in zip(pieces, counts)]


def _check_blocks(blocks: Sequence[tf.Tensor], dim: int) -> None:
    widths = [int(block.shape[1]) for block in blocks]
    if not blocks or any(width % dim for width in widths):
        raise ValueError(f"the interaction needs blocks of whole {dim}-wide vectors, got widths {widths}")


def dot_interaction(bottom: tf.Tensor, blocks: Sequence[tf.Tensor]) -> tf.Tensor:
    """bottom [B, D] and the embeddings as column blocks [B, k * D] (T vectors in all, in table order)
    -> [B, D + (T+1)T/2], in the inputs' dtype. The blocks are stacked with the bottom vector once."""
    dim = int(bottom.shape[1])
    _check_blocks(blocks, dim)

    @tf.autograph.experimental.do_not_convert  # autograph would rewrite the returned gradient function
    @tf.custom_gradient
    def interaction(bottom, *blocks):
        with tf.name_scope(NAME_SCOPE):
            features = _block_features([bottom], blocks, dim)
            output = tf.concat([bottom, _lower_triangle(features)], axis=1)

        def gradient(d_output):
            with tf.name_scope(GRADIENT_SCOPE):
                d_pairs = d_output[:, dim:]
                d_bottom = d_output[:, :dim] + tf.reshape(_gram_gradient_rows(d_pairs, features, slice(0, 1)),
                                                          [-1, dim])
                return [d_bottom, *_block_gradients(_gram_gradient_rows(d_pairs, features, slice(1, None)), blocks)]

        return output, gradient

    return interaction(bottom, *blocks)


def embedding_dot_interaction(blocks: Sequence[tf.Tensor], dim: int) -> tf.Tensor:
    """The embeddings as column blocks [B, k * dim] (T vectors in all) -> [B, T(T-1)/2]: the pairwise dot
    products of the embeddings alone."""
    _check_blocks(blocks, dim)

    @tf.autograph.experimental.do_not_convert
    @tf.custom_gradient
    def interaction(*blocks):
        with tf.name_scope(NAME_SCOPE):
            features = _block_features([], blocks, dim)
            output = _lower_triangle(features)

        def gradient(d_output):
            with tf.name_scope(GRADIENT_SCOPE):
                return _block_gradients(_gram_gradient_rows(d_output, features, slice(None)), blocks)

        return output, gradient

    return interaction(*blocks)
