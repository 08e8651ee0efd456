"""Exact ROC AUC in numpy (the generator's Bayes AUC and the logistic-regression check need it; the
data package imports nothing from `dlrm.train`, so it carries its own)."""
from __future__ import annotations

import numpy as np


def roc_auc(labels, scores) -> float:
    """P(score of a random positive > score of a random negative) + 0.5 P(tie); nan for one class."""
    labels = np.asarray(labels).reshape(-1).astype(bool)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if labels.shape != scores.shape:
        raise ValueError(f"{labels.size} labels but {scores.size} scores")
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_scores)) + 1))
    ends = np.append(starts[1:], scores.size)
    mid_rank = (starts + ends + 1) / 2.0  # average 1-based rank of each run of ties
    positives = np.add.reduceat(labels[order].astype(np.float64), starts)
    rank_sum = float(positives @ mid_rank)
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
