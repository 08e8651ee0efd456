"""A logistic-regression baseline on a split-binary dataset (numpy only): sanity check of a dataset.

One weight per (table, id) for the `max_ids` most frequent ids of each table (rarer ids share one
weight; a multi-hot row adds the weights of its bag's ids), plus standardised numericals; trained
with Adagrad on minibatches. On the synthetic data it learns the first-order part of the hidden
click model, so its AUC sits clearly above 0.5 and below the recorded Bayes AUC. With a `map`
channel (displays) it reports MAP@12 too: the wide-only proxy of the Wide & Deep dataset.
CLI: `python -m dlrm.data.synthetic.lr_baseline DATASET_DIR`.
"""
from __future__ import annotations

import json
import sys
from typing import Optional, Sequence

import numpy as np

from dlrm import argtypes
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import Batch, BatchReader
from dlrm.exact_metrics import exact_auc, map_at_k


def _load(spec: FeatureSpec, mapping: str, limit: Optional[int]) -> Batch:
    reader = BatchReader(spec, mapping, global_batch_size=max(1, min(limit or spec.num_rows(mapping),
                                                                      spec.num_rows(mapping))), prefetch=0)
    return reader.read_batch(0)


def logistic_regression_auc(spec: FeatureSpec, max_ids: int = 64, epochs: int = 3, batch_size: int = 1024,
                            learning_rate: float = 0.1, train_limit: Optional[int] = None,
                            seed: int = 0) -> dict:
    """Train on `train`, return {"lr_auc": test AUC, "bayes_auc": from metadata (or None)}."""
    train, test = _load(spec, "train", train_limit), _load(spec, "test", None)
    buckets = [min(card, max_ids + 1) for card in spec.cardinalities]  # ids >= max_ids share the last
    offsets = np.concatenate(([0], np.cumsum(buckets)[:-1])).astype(np.int64)
    # one entry per id column (a multi-hot table has max_hotness columns); -1 padding reads `padding`
    column_buckets, column_offsets = (np.repeat(values, spec.hotnesses) for values in (buckets, offsets))
    padding = int(sum(buckets))  # a weight that stays 0

    def features(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        ids = np.minimum(batch.categorical, column_buckets - 1) + column_offsets
        return np.where(batch.categorical < 0, padding, ids), batch.numerical

    mean, std = train.numerical.mean(axis=0), train.numerical.std(axis=0) + 1e-6
    train_ids, train_x = features(train)
    train_x = (train_x - mean) / std
    w_ids = np.zeros(padding + 1)
    w_x = np.zeros(train_x.shape[1])
    bias = 0.0
    g_ids, g_x, g_b = np.full_like(w_ids, 1e-8), np.full_like(w_x, 1e-8), 1e-8
    rng = np.random.default_rng(seed)
    n = train_ids.shape[0]
    for _ in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            rows = order[start:start + batch_size]
            ids, x, y = train_ids[rows], train_x[rows], train.label[rows]
            logit = bias + w_ids[ids].sum(axis=1) + x @ w_x
            err = (1.0 / (1.0 + np.exp(-logit)) - y) / rows.size
            grad_ids = np.bincount(ids.ravel(), weights=np.repeat(err, ids.shape[1]), minlength=w_ids.size)
            grad_ids[padding] = 0.0
            grad_x, grad_b = x.T @ err, err.sum()
            g_ids += grad_ids ** 2
            g_x += grad_x ** 2
            g_b += grad_b ** 2
            w_ids -= learning_rate * grad_ids / np.sqrt(g_ids)
            w_x -= learning_rate * grad_x / np.sqrt(g_x)
            bias -= learning_rate * grad_b / np.sqrt(g_b)
    test_ids, test_x = features(test)
    scores = bias + w_ids[test_ids].sum(axis=1) + ((test_x - mean) / std) @ w_x
    result = {"lr_auc": exact_auc(test.label, scores), "bayes_auc": spec.metadata.get("bayes_auc"),
              "train_rows": int(n), "test_rows": int(test_ids.shape[0])}
    if test.group is not None:  # a dataset with displays (map channel): the ranking metric too
        result.update(lr_map_at_12=map_at_k(test.group, test.label, scores),
                      bayes_map_at_12=spec.metadata.get("bayes_map_at_12"))
    return result


def build_parser() -> argtypes.ArgumentParser:
    parser = argtypes.ArgumentParser(prog="python -m dlrm.data.synthetic.lr_baseline",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("dataset", help="split-binary dataset directory (with feature_spec.yaml)")
    parser.add_argument("--epochs", type=argtypes.positive_int, default=3)
    parser.add_argument("--max_ids", type=argtypes.positive_int, default=64)
    parser.add_argument("--train_limit", type=argtypes.positive_int, default=None,
                        help="use only the first N training rows")
    return parser


def baseline_from_flags(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    result = logistic_regression_auc(FeatureSpec.load(args.dataset), args.max_ids, args.epochs,
                                     train_limit=args.train_limit)
    print(json.dumps(result, indent=1))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(baseline_from_flags, argv)


if __name__ == "__main__":
    sys.exit(main())
