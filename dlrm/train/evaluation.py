"""Evaluation: the forward pass over the test mapping, then exact AUC, log loss and MAP@12 over every rank's rows.

Each rank predicts its contiguous slice of every global batch; the labels, logits, group ids and the
slices' places in the mapping are gathered to every rank and put back in dataset row order, so every
rank scores the same rows in the same order (no broadcast) and a `--predictions_path` file is the same
whatever the world size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import numpy as np
import tensorflow as tf

from dlrm.dist import ProcessGroup
from dlrm.train import stopping
from dlrm.train.build import Parts, make_reader
from dlrm.train.eval_result import EvalMetrics, score
from dlrm.train.predictions import PredictionsPathError, write_predictions


@dataclass
class Predictions:
    """Rows and their logits: one rank's (in the order it read them) or all of them (in dataset row order)."""

    labels: np.ndarray  # float32 [n]
    logits: np.ndarray  # float32 [n]
    groups: Optional[np.ndarray]  # int64 [n] group ids of the `map` channel, None without one
    # int64 [k, 2]: (dataset row of the first row, rows) of each batch slice, in the order of the rows above
    slices: np.ndarray


def predict_batches(predict_step, batches: Iterable) -> Predictions:
    """This rank's rows of every batch with their logits.

    `batches` yields objects with `numerical`, `categorical`, `label`, `first_row` and `group` (the data
    layer's `Batch`). Every rank must iterate the same number of batches (the sharded embedding exchanges
    ids in each).
    """
    labels, logits, groups, slices = [], [], [], []
    for batch in batches:
        labels.append(np.asarray(batch.label, dtype=np.float32).reshape(-1))
        logits.append(predict_step(tf.convert_to_tensor(batch.numerical, tf.float32),
                                   tf.convert_to_tensor(batch.categorical, tf.int32)).numpy().reshape(-1))
        slices.append((batch.first_row, labels[-1].size))
        if batch.group is not None:
            groups.append(np.array(batch.group, dtype=np.int64))  # a copy: the reader reuses the batch's arrays
    if len(groups) not in (0, len(labels)):
        raise ValueError(f"{len(groups)} of {len(labels)} batches have group ids")

    def joined(parts: list, dtype) -> np.ndarray:
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros([0], dtype)

    return Predictions(joined(labels, np.float32), joined(logits, np.float32),
                       joined(groups, np.int64) if groups else None, np.array(slices, np.int64).reshape(-1, 2))


def dataset_order(slices: np.ndarray) -> np.ndarray:
    """Positions, in rows laid out slice after slice as `slices` lists them, that put the rows in dataset order.

    `slices`: [k, 2] (first dataset row, rows) of every rank's batch slices, rank after rank (as allgather
    concatenates them). The slices must tile one contiguous range of rows: anything else is a bug.
    """
    first, rows = slices[:, 0], slices[:, 1]
    starts = np.cumsum(rows) - rows  # where each slice's rows begin in the gathered arrays
    by_row = np.argsort(first, kind="stable")
    by_row = by_row[rows[by_row] > 0]
    if by_row.size and np.any(first[by_row][1:] != (first + rows)[by_row][:-1]):
        raise RuntimeError("the ranks' evaluation slices do not tile the test mapping: rows missing or repeated")
    sorted_rows = rows[by_row]
    offset_in_slice = np.arange(int(sorted_rows.sum())) - np.repeat(np.cumsum(sorted_rows) - sorted_rows, sorted_rows)
    return np.repeat(starts[by_row], sorted_rows) + offset_in_slice


def gather_predictions(group: ProcessGroup, local: Predictions) -> Predictions:
    """Every rank's predictions, on every rank, in dataset row order."""

    def gathered(array: np.ndarray, name: str) -> np.ndarray:
        return group.allgather(tf.constant(array), name=name).numpy()

    slices = gathered(local.slices.reshape(-1), "eval_slices").reshape(-1, 2)
    order = dataset_order(slices)
    groups = None if local.groups is None else gathered(local.groups, "eval_groups")[order]
    first_row = int(slices[slices[:, 1] > 0, 0].min()) if order.size else 0
    return Predictions(gathered(local.labels, "eval_labels")[order], gathered(local.logits, "eval_logits")[order],
                       groups, np.array([[first_row, order.size]], np.int64))


def save_predictions(group: ProcessGroup, path: str, predictions: Predictions) -> None:
    """Rank 0 writes the file; every rank learns whether that worked and stops together if it did not."""
    problem = None
    if group.rank == 0:
        try:
            write_predictions(path, predictions.labels, predictions.logits, predictions.groups)
        except PredictionsPathError as error:
            problem = str(error)
    group.raise_if_any_failed(problem, PredictionsPathError, name="predictions_agree")


def evaluate(parts: Parts, predict_step, pending_signal: Callable[[], Optional[int]] = lambda: None,
             predictions_path: Optional[str] = None) -> EvalMetrics:
    """Exact metrics over the whole test mapping (all ranks' predictions); MAP@12 when it has group ids.

    `pending_signal()`: a stop signal received meanwhile (training), agreed on at every batch so a long
    evaluation does not delay the checkpoint past Slurm's KillWait. `predictions_path`: also write every
    row's prediction there (`dlrm.train.predictions`)."""
    data, group = parts.config.data, parts.group
    reader = make_reader(parts, data.test_mapping, data.eval_batch_size)
    # raises StopAgreed on every rank at once if one cannot read a batch: no rank is left in a collective
    local = predict_batches(predict_step, stopping.read_together(reader, group, pending_signal))
    predictions = gather_predictions(group, local)
    if predictions_path:
        save_predictions(group, predictions_path, predictions)
    return score(predictions.labels, predictions.logits, predictions.groups)
