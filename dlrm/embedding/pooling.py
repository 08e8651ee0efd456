"""Pooling a bag of ids into one vector per row: the one implementation both embedding layers use.

A bag is one row's ids of one table, `hotness` columns wide, real ids first and `PADDING_ID` (-1)
after them (dlrm.features). Padding is masked before anything is looked up, so it never produces a
gradient row: the gradient of a table is `tf.IndexedSlices` over the ids that occurred. A one-hot
table (`multi_hot` False) has exactly one real id per row and stays a plain gather.
"""
from __future__ import annotations

import tensorflow as tf

from dlrm.features import PADDING_ID


def bag_sums(table, ids):
    """Sum of `table`'s rows at the real ids of every bag of `ids` [B, H] -> [B, width].

    An all-padding row sums to zeros. Ids below 0 count as padding: the sharded layer also marks
    ids outside a row slice that way.
    """
    batch, hotness = tf.shape(ids)[0], ids.shape[1]
    flat = tf.reshape(ids, [-1])
    kept = tf.cast(tf.where(flat > PADDING_ID)[:, 0], tf.int32)  # row-major: bags stay in row order
    vectors = tf.gather(table, tf.gather(flat, kept))  # only real ids: sparse gradient rows
    # The bags' rows are sorted, so the sorted segment sum applies (faster than an unsorted one on CPU).
    return tf.sparse.segment_sum(vectors, tf.range(tf.shape(kept)[0]), kept // hotness, num_segments=batch)


def bag_counts(ids):
    """Real ids per row of `ids` [B, H] as float32 [B] (the divisor of a mean)."""
    return tf.reduce_sum(tf.cast(ids > PADDING_ID, tf.float32), axis=1)


def mean_of(sums, counts):
    """Mean from a bag's sum and count; an empty bag (count 0) keeps its zero sum."""
    return sums / tf.maximum(counts, 1.0)[:, None]


def pool(table, ids, combiner: str, multi_hot: bool):
    """One vector per row of `ids` [B, H]: `combiner` (sum or mean) over the bag, a gather if one-hot."""
    if not multi_hot:
        return tf.gather(table, tf.reshape(ids, [-1]))
    sums = bag_sums(table, ids)
    return sums if combiner == "sum" else mean_of(sums, bag_counts(ids))
