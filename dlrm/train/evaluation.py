"""Evaluation: the forward pass over the test mapping, then exact AUC and log loss over every rank's rows."""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Tuple

import numpy as np
import tensorflow as tf

from dlrm.metrics import exact_auc, log_loss_from_logits
from dlrm.train import stopping
from dlrm.train.build import Parts, make_reader


def predict_batches(predict_step, batches: Iterable) -> Tuple[np.ndarray, np.ndarray]:
    """(labels float32 [n], logits float32 [n]) for this rank's rows of every batch.

    `batches` yields objects with `numerical`, `categorical`, `label` (the data layer's `Batch`).
    Every rank must iterate the same number of batches (the sharded embedding exchanges ids in each).
    """
    labels, logits = [], []
    for batch in batches:
        labels.append(np.asarray(batch.label, dtype=np.float32).reshape(-1))
        logits.append(predict_step(tf.convert_to_tensor(batch.numerical, tf.float32),
                                   tf.convert_to_tensor(batch.categorical, tf.int32)).numpy())
    if not labels:
        return np.zeros([0], np.float32), np.zeros([0], np.float32)
    return np.concatenate(labels), np.concatenate(logits).astype(np.float32)


def evaluate(parts: Parts, predict_step,
             pending_signal: Callable[[], Optional[int]] = lambda: None) -> Tuple[float, float]:
    """Exact AUC and log loss over the whole test mapping (all ranks' predictions).

    `pending_signal()`: a stop signal received meanwhile (training), agreed on at every batch so a long
    evaluation does not delay the checkpoint past Slurm's KillWait."""
    data, group = parts.config.data, parts.group
    reader = make_reader(parts, data.test_mapping, data.eval_batch_size)
    # raises StopAgreed on every rank at once if one cannot read a batch: no rank is left in a collective
    labels, logits = predict_batches(predict_step, stopping.read_together(reader, group, pending_signal))
    # Every rank gets every prediction and scores them: the same numbers everywhere, no broadcast.
    all_labels = group.allgather(tf.constant(labels), name="eval_labels").numpy()
    all_logits = group.allgather(tf.constant(logits), name="eval_logits").numpy()
    return exact_auc(all_labels, all_logits), log_loss_from_logits(all_labels, all_logits)
