"""The forward pass over a reader's batches (scored with `dlrm.metrics`).

Scores are logits: AUC only depends on their
order, and float32 sigmoids saturate to exactly 1.0 above logit ~17, which would create false ties.
"""
from __future__ import annotations

from typing import Iterable, Tuple

import numpy as np
import tensorflow as tf


def make_predict_step(model):
    """A `tf.function` (one trace for every batch size, including 0) returning logits."""

    @tf.function(input_signature=model.input_signature)
    def predict_step(numerical, categorical):
        return model(numerical, categorical, training=False)

    return predict_step


def predict_batches(model_or_step, batches: Iterable) -> Tuple[np.ndarray, np.ndarray]:
    """(labels float32 [n], logits float32 [n]) for this rank's rows of every batch.

    `batches` yields objects with `numerical`, `categorical`, `label` (the data layer's `Batch`).
    Every rank must iterate the same number of batches (the sharded embedding exchanges ids in each).
    """
    step = model_or_step if isinstance(model_or_step, tf.types.experimental.GenericFunction) \
        else make_predict_step(model_or_step)
    labels, logits = [], []
    for batch in batches:
        labels.append(np.asarray(batch.label, dtype=np.float32).reshape(-1))
        logits.append(step(tf.convert_to_tensor(batch.numerical, tf.float32),
                           tf.convert_to_tensor(batch.categorical, tf.int32)).numpy())
    if not labels:
        return np.zeros([0], np.float32), np.zeros([0], np.float32)
    return np.concatenate(labels), np.concatenate(logits).astype(np.float32)
