"""The Wide & Deep model's embedding-layer input, cross ids included (`dlrm.feature_crosses` says how they are
computed and why here: every path, one rank or N, training or serving, calls the model with the
batch's id columns and the model feeds its embedding layer through `embedding_ids`)."""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from dlrm.feature_crosses import HASH_MULTIPLIER, HASH_OFFSET, HASH_PRIME, Cross


def cross_ids(categorical: tf.Tensor, crosses: Sequence[Cross]) -> tf.Tensor:
    """Cross ids [B, len(crosses)] int32 of a batch's id columns [B, total_hotness] (the same values as
    `dlrm.feature_crosses.cross_key`)."""
    columns = []
    for cross in crosses:
        a = tf.cast(categorical[:, cross.first_column], tf.int64)
        b = tf.cast(categorical[:, cross.second_column], tf.int64)
        key = a * cross.second_rows + b
        if not cross.exact:
            mixed = (tf.math.floormod(key, HASH_PRIME) * HASH_MULTIPLIER + HASH_OFFSET) % HASH_PRIME
            key = tf.math.floormod(mixed, cross.buckets)
        columns.append(tf.cast(key, tf.int32))
    return tf.stack(columns, axis=1)


def embedding_ids(categorical: tf.Tensor, copies: int, crosses: Sequence[Cross]) -> tf.Tensor:
    """The model's embedding-layer input: the batch's id columns `copies` times side by side (deep, then
    wide tables), then the cross ids (the cross tables come last, `dlrm.model_tables.model_tables`)."""
    parts = [categorical] * copies
    if crosses:
        parts.append(cross_ids(categorical, crosses))
    return tf.concat(parts, axis=1) if len(parts) > 1 else parts[0]
