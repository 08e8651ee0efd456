"""Exact evaluation metrics in numpy: no TensorFlow, so the data layer (generator's Bayes AUC,
logistic-regression check) and the trainer share one implementation.

`exact_auc` is the rank statistic (Mann-Whitney U) over ALL predictions, with tied scores given
their average rank, accumulated in float64: O(n log n) for the sort, O(n) after. NVIDIA's reference
uses a 8000-threshold histogram approximation instead.
"""
from __future__ import annotations

import numpy as np


def _check_binary_labels(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels).reshape(-1)
    bad = ~((labels == 0) | (labels == 1))
    if bad.any():
        first = int(np.argmax(bad))
        raise ValueError(f"labels must be 0 or 1; row {first} has {labels[first]!r}")
    return labels.astype(bool)


def exact_auc(labels, scores) -> float:
    """Area under the ROC curve = P(score of a random positive > a random negative) + 0.5 P(tie).

    Returns nan when only one class is present (the AUC is undefined there).
    """
    positive = _check_binary_labels(labels)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.shape != positive.shape:
        raise ValueError(f"{positive.size} labels but {scores.size} scores")
    if np.isnan(scores).any():
        raise ValueError(f"scores contain nan (first at row {int(np.argmax(np.isnan(scores)))})")
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    sorted_positive = positive[order]
    # Runs of equal scores: [starts[k], ends[k]) in sorted order; each gets the average 1-based rank.
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [scores.size]))
    average_rank = (starts + 1 + ends).astype(np.float64) / 2.0
    positives_per_run = np.add.reduceat(sorted_positive.astype(np.float64), starts)
    rank_sum = float(np.dot(positives_per_run, average_rank))
    u_statistic = rank_sum - n_pos * (n_pos + 1) / 2.0
    return u_statistic / (float(n_pos) * float(n_neg))


def log_loss_from_logits(labels, logits) -> float:
    """Mean binary cross-entropy, computed stably from logits in float64: softplus(z) - y z."""
    y = _check_binary_labels(labels).astype(np.float64)
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    if z.shape != y.shape:
        raise ValueError(f"{y.size} labels but {z.size} logits")
    if z.size == 0:
        return float("nan")
    softplus = np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))
    return float(np.mean(softplus - y * z))


MAP_K = 12  # MAP@12: the Kaggle Outbrain metric NVIDIA's Wide & Deep reports


def ranking_order(groups, labels, scores) -> np.ndarray:
    """Row order that ranks every group's rows: by group id, then score (descending), then label (ascending).

    The label as last key is the tie rule: among rows of one group with equal scores, the unclicked ones
    come first, so a tie never helps a clicked row (a constant predictor scores its worst MAP, not a
    lucky one) and the result does not depend on the order rows arrive in (batches, ranks).
    """
    return np.lexsort((labels, -scores, groups))


def map_at_k(groups, labels, scores, k: int = MAP_K) -> float:
    """Mean average precision at k over the groups (e.g. displays) that have at least one click.

    AP@k of a group = sum over its clicked rows ranked r <= k of (clicks ranked <= r) / r, divided by
    min(clicks in the group, k): with exactly one click, 1/rank if rank <= k, else 0. Ties: see
    `ranking_order`. Groups without a click do not count; nan when no group has one. Exact over all rows
    given (a group whose rows came from several batches or ranks counts once), accumulated in float64.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    clicked = _check_binary_labels(labels)
    groups = np.asarray(groups).reshape(-1).astype(np.int64, copy=False)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not (groups.size == clicked.size == scores.size):
        raise ValueError(f"{groups.size} group ids, {clicked.size} labels and {scores.size} scores: they must match")
    if np.isnan(scores).any():
        raise ValueError(f"scores contain nan (first at row {int(np.argmax(np.isnan(scores)))})")
    if groups.size == 0:
        return float("nan")
    order = ranking_order(groups, clicked, scores)
    sorted_groups, sorted_clicked = groups[order], clicked[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_groups[1:] != sorted_groups[:-1])))
    group_of_row = np.cumsum(np.concatenate(([False], sorted_groups[1:] != sorted_groups[:-1])))
    rank = np.arange(groups.size) - starts[group_of_row] + 1  # 1-based rank within the group
    clicks_so_far = np.cumsum(sorted_clicked) - np.concatenate(([0], np.cumsum(sorted_clicked)))[starts][group_of_row]
    clicks_per_group = np.add.reduceat(sorted_clicked.astype(np.int64), starts)
    counted = sorted_clicked & (rank <= k)
    precision = np.where(counted, clicks_so_far / rank, 0.0)
    ap_sum = np.add.reduceat(precision, starts)
    has_click = clicks_per_group > 0
    if not has_click.any():
        return float("nan")
    ap = ap_sum[has_click] / np.minimum(clicks_per_group[has_click], k)
    return float(np.mean(ap))


def random_order_ap(sizes: np.ndarray, k: int = MAP_K) -> np.ndarray:
    """Each group's expected AP@k when its `sizes` rows (one positive) come in a random order:
    (1/n) * sum over ranks r <= min(n, k) of 1/r."""
    harmonic = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, k + 1))))
    return harmonic[np.minimum(sizes, k)] / sizes
