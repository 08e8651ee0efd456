"""One copy to put a row's vectors together from several sources: a stitch of fixed-size blocks.

The sharded layer's output row is made of blocks of `block` floats coming from the all-to-all's
returned buffer and from local tensors (replicated tables, summed row slices). `tf.dynamic_stitch`
places every block with one copy; its gradient here is one gather per source (the block positions
form a permutation, so nothing is scattered or summed), instead of autodiff's slices and concatenations.
"""
from __future__ import annotations

from typing import List

import tensorflow as tf


def stitch_blocks(indices: List[tf.Tensor], data: List[tf.Tensor], rows, overflow: bool):
    """Rows [0, rows) of `tf.dynamic_stitch(indices, data)`; every index appears exactly once.

    `overflow`: some indices are >= rows (blocks parked past the output, e.g. row slices' partial sums
    that reach the output another way); they are dropped and get a zero gradient.
    """

    @tf.custom_gradient
    def stitch(*sources):
        stitched = tf.dynamic_stitch(indices, list(sources))
        out = stitched[:rows] if overflow else stitched

        def grad(upstream):
            if overflow:
                parked = tf.zeros([tf.shape(stitched)[0] - rows, tf.shape(upstream)[1]], upstream.dtype)
                upstream = tf.concat([upstream, parked], axis=0)
            return [tf.gather(upstream, index) for index in indices]

        return out, grad

    return stitch(*data)
