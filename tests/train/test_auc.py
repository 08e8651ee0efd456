"""Exact AUC vs a brute-force pairwise count, log loss, and predictions over reader batches."""
from collections import namedtuple

import numpy as np
import pytest

from dlrm.config import ModelConfig
from dlrm.embedding.local import LocalEmbedding
from dlrm.exact_metrics import exact_auc, log_loss_from_logits
from dlrm.model.build import build_model
from dlrm.train.evaluation import predict_batches
from dlrm.train.step import make_predict_step
from tests.support.contracts import one_hot_contract
from tests.support.displays import brute_force_auc


@pytest.mark.parametrize("n,levels,seed", [(50, 5, 0), (999, 20, 1), (2000, 3, 2), (1500, None, 3)])
def test_exact_auc_equals_brute_force_pairwise_count_with_ties(n, levels, seed):
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.float32)
    scores = rng.normal(size=n) + labels
    if levels is not None:  # heavy ties, also across classes
        scores = np.round(scores * levels / 4) / levels
    assert exact_auc(labels, scores) == pytest.approx(brute_force_auc(labels, scores), abs=1e-12)


def test_auc_edge_cases():
    assert exact_auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert exact_auc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0
    assert exact_auc([1, 0, 1, 0], [0.5, 0.5, 0.5, 0.5]) == 0.5
    assert np.isnan(exact_auc([1, 1], [0.1, 0.2]))
    with pytest.raises(ValueError, match="row 2"):
        exact_auc([0, 1, 0.5], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="labels but"):
        exact_auc([0, 1], [0.1])


def test_log_loss_from_logits_is_stable_and_matches_the_definition():
    rng = np.random.default_rng(0)
    labels = (rng.random(100) < 0.5).astype(np.float32)
    logits = rng.normal(size=100) * 3
    p = 1 / (1 + np.exp(-logits))
    expected = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert log_loss_from_logits(labels, logits) == pytest.approx(expected, rel=1e-12)
    assert log_loss_from_logits([1, 0], [1000.0, -1000.0]) == 0.0
    assert log_loss_from_logits([0], [1000.0]) == pytest.approx(1000.0)


Batch = namedtuple("Batch", "numerical categorical label global_rows first_row group")


def test_predict_batches_collects_every_row_including_empty_batches():
    contract = one_hot_contract([4, 6], 4)
    model = build_model(ModelConfig(embedding_dim=4, bottom_mlp=(8, 4), top_mlp=(8, 1)), contract,
                        LocalEmbedding(contract.tables, seed=0))
    rng = np.random.default_rng(0)
    batches = []
    for first_row, b in ((0, 5), (5, 0), (10, 3)):
        batches.append(Batch(rng.normal(size=(b, 13)).astype(np.float32),
                             rng.integers(0, 4, size=(b, 2)).astype(np.int32),
                             (rng.random(b) < 0.5).astype(np.float32), 8, first_row, None))
    step = make_predict_step(model)
    got = predict_batches(step, batches)
    assert got.labels.shape == got.logits.shape == (8,) and got.groups is None
    np.testing.assert_array_equal(got.labels, np.concatenate([b.label for b in batches]))
    np.testing.assert_array_equal(got.slices, [[0, 5], [5, 0], [10, 3]])
    direct = np.concatenate([model(b.numerical, b.categorical).numpy() for b in batches])
    np.testing.assert_allclose(got.logits, direct, rtol=1e-6)
    assert step.experimental_get_tracing_count() == 1  # one trace for all batch sizes
    assert predict_batches(step, []).labels.shape == (0,)
