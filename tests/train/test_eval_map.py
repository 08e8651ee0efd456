"""MAP@12 over a whole test mapping read in batches by several ranks; the predictions file; the metrics' texts.

The reader really slices each global batch between ranks (world sizes 1, 2, 3) with a small eval batch, so
displays are split over batches and ranks; what `gather_predictions` does after Horovod's allgather (which
concatenates the ranks' arrays in rank order) is done here by concatenating them the same way.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

from dlrm.atomic import replaced_atomically
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import write_split_binary
from dlrm.data.reader.reader import BatchReader
from dlrm.exact_metrics import map_at_k
from dlrm.train.eval_result import BayesOptimal, EvalMetrics, final_text, progress_text, score
from dlrm.train.evaluation import Predictions, dataset_order, predict_batches
from dlrm.train.metrics_log import MetricsLog, read_metrics
from dlrm.train.predictions import HEADER, PredictionsPathError, path_problem, write_predictions
from tests.support.displays import (
    CARDS,
    NUM_NUMERICAL,
    brute_force_auc,
    brute_force_map,
    display_rows,
    read_predictions,
)


def tied_logits(numerical, categorical):
    """A scoring function with few levels: many ties inside displays."""
    return tf.round(tf.cast(numerical[:, 0], tf.float32) * 2.0) + tf.cast(categorical[:, 0] % 2, tf.float32)


@pytest.fixture(scope="module", params=["one click per display", "0 to several clicks per display"])
def dataset(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("displays")
    label, numerical, categorical, group = display_rows(60, seed=5)
    if request.param != "one click per display":
        label = np.random.default_rng(1).random(label.size) < 0.3
    spec = FeatureSpec.criteo_like(CARDS, NUM_NUMERICAL, mappings=("test",), group="display_id")
    write_split_binary(str(root), spec, "test", label, numerical, categorical, group)
    spec.save(str(root))
    return FeatureSpec.load(str(root)), (label, numerical, categorical, group)


def gathered(spec, world_size: int, batch_size: int) -> Predictions:
    """Every rank's predictions, concatenated in rank order as an allgather does, then put in dataset order."""
    ranks = [predict_batches(tied_logits, BatchReader(spec, "test", batch_size, rank=r, world_size=world_size,
                                                      prefetch=0))
             for r in range(world_size)]
    order = dataset_order(np.concatenate([p.slices for p in ranks]))

    def joined(field):
        return np.concatenate([getattr(p, field) for p in ranks])[order]

    return Predictions(joined("labels"), joined("logits"), joined("groups"), np.zeros([0, 2], np.int64))


@pytest.mark.parametrize("world_size, batch_size", [(1, 7), (2, 7), (3, 11), (2, 10_000)])
def test_map_over_ranks_and_batches_equals_brute_force_in_dataset_order(dataset, world_size, batch_size):
    spec, (label, numerical, categorical, group) = dataset
    got = gathered(spec, world_size, batch_size)
    np.testing.assert_array_equal(got.groups, group)  # every row once, in dataset order
    np.testing.assert_array_equal(got.labels, label)
    expected_logits = tied_logits(numerical.astype(np.float32), categorical).numpy()
    np.testing.assert_array_equal(got.logits, expected_logits)
    if batch_size < group.size:  # some displays really are split between batches
        batch_of_row = np.arange(group.size) // batch_size
        assert any(np.unique(batch_of_row[group == g]).size > 1 for g in np.unique(group))
    metrics = score(got.labels, got.logits, got.groups)
    assert metrics.map_at_12 == pytest.approx(brute_force_map(group, label.astype(int), expected_logits), abs=1e-12)
    assert metrics.auc == pytest.approx(brute_force_auc(label.astype(int), expected_logits), abs=1e-12)
    assert metrics.rows == group.size and metrics.groups == np.unique(group[label]).size


def test_a_display_split_over_batches_counts_once():
    """Per-batch grouping (NVIDIA's) would score display 7 twice: once per batch its rows fall in."""
    groups = np.array([3, 3, 7, 7, 7, 9, 9])
    labels = np.array([1, 0, 0, 1, 0, 0, 1], np.float32)
    logits = np.array([2, 1, 5, 4, 3, 0, 1], np.float32)
    slices = np.array([[0, 3], [3, 4]])  # batch 0: rows 0-2, batch 1: rows 3-6
    order = dataset_order(slices)
    assert score(labels[order], logits[order], groups[order]).map_at_12 == pytest.approx((1 + 1 / 2 + 1) / 3)


def test_dataset_order_of_rank_slices_and_a_broken_tiling():
    # rank 0 read rows [0, 2) and [4, 6), rank 1 rows [2, 4) and [6, 7) and an empty slice
    slices = np.array([[0, 2], [4, 2], [2, 2], [6, 1], [7, 0]])
    np.testing.assert_array_equal(dataset_order(slices), [0, 1, 4, 5, 2, 3, 6])
    assert dataset_order(np.zeros([0, 2], np.int64)).size == 0
    with pytest.raises(RuntimeError, match="do not tile"):
        dataset_order(np.array([[0, 2], [3, 2]]))  # row 2 missing


def test_predictions_file_holds_every_row_exactly(tmp_path):
    rng = np.random.default_rng(0)
    logits = np.concatenate([rng.normal(0, 5, 200), [30.0, -30.0, 0.0, 1e-30, 3e38]]).astype(np.float32)
    labels = (rng.random(logits.size) < 0.4).astype(np.float32)
    groups = rng.integers(-2**62, 2**62, logits.size)
    path = tmp_path / "predictions.csv"
    write_predictions(str(path), labels, logits, groups)
    header, got_groups, got_labels, got_logits, probabilities = read_predictions(path)
    assert tuple(header) == HEADER == ("group_id", "label", "logit", "probability")
    np.testing.assert_array_equal(got_groups, groups)
    np.testing.assert_array_equal(got_labels, labels)
    np.testing.assert_array_equal(got_logits, logits)  # the shortest text that reads back to the same float32
    np.testing.assert_allclose(probabilities, 1 / (1 + np.exp(-logits.astype(np.float64))), rtol=1e-15)
    assert probabilities[200] < 1.0 and probabilities[201] > 0.0  # float64: no saturation at logit 30
    assert os.listdir(tmp_path) == ["predictions.csv"]  # no temp file left

    write_predictions(str(path), labels[:3], logits[:3], None)  # replaces the file; no map channel
    header, got_groups, got_labels, _, _ = read_predictions(path)
    assert got_groups is None and got_labels.tolist() == labels[:3].tolist()
    assert path.read_text().splitlines()[1].startswith(",")


def test_predictions_path_problems_are_found_before_writing(tmp_path):
    assert path_problem(str(tmp_path / "p.csv")) is None and os.listdir(tmp_path) == []  # the probe is gone
    missing = str(tmp_path / "no" / "p.csv")
    assert path_problem(missing) == f"cannot write the predictions file {missing} (--predictions_path): " \
                                    f"No such file or directory (ENOENT)"
    assert path_problem(str(tmp_path)).endswith("(--predictions_path): it is a directory")
    (tmp_path / "file").write_text("")
    assert "(ENOTDIR)" in path_problem(str(tmp_path / "file" / "p.csv"))
    with pytest.raises(PredictionsPathError, match="cannot write the predictions file .*ENOENT"):
        write_predictions(missing, np.zeros(2), np.zeros(2, np.float32), None)


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "predictions.csv"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with replaced_atomically(path) as f:
            f.write(b"group_id,label")
            raise RuntimeError("evaluation failed half way")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["predictions.csv"]


def test_texts_and_records_with_and_without_map(tmp_path):
    with_map = EvalMetrics(0.8, 0.45, rows=1000, map_at_12=0.6, groups=150)
    bayes = BayesOptimal(auc=0.84, map_at_12=0.64)
    assert final_text(with_map, bayes, 12) == (
        "final AUC 0.80000, log loss 0.45000, MAP@12 0.60000 at step 12; Bayes-optimal AUC of this synthetic "
        "dataset 0.84000 (ratio 0.9524); Bayes-optimal MAP@12 0.64000 (ratio 0.9375)")
    plain = EvalMetrics(0.8, 0.45, rows=1000)
    assert final_text(plain, BayesOptimal(auc=0.84), 12) == (
        "final AUC 0.80000, log loss 0.45000 at step 12; Bayes-optimal AUC of this synthetic dataset 0.84000 "
        "(ratio 0.9524)")
    assert progress_text(with_map, bayes) == ("AUC 0.80000 (Bayes-optimal 0.84000, ratio 0.9524)  logloss 0.45000  "
                                              "MAP@12 0.60000 (Bayes-optimal 0.64000, ratio 0.9375) over 150 groups  "
                                              "(1,000 rows)")
    import io

    stream = io.StringIO()
    log = MetricsLog(str(tmp_path), use_tqdm=False, tensorboard=False, stream=stream)
    log.train(1, 0.5, 0.1, 100.0, epoch=0.5)
    log.eval(1, plain, BayesOptimal(auc=0.84))
    log.eval(2, with_map, bayes)
    png = log.close()
    evals = [r for r in read_metrics(str(tmp_path / "metrics.jsonl")) if r["kind"] == "eval"]
    assert "map_at_12" not in evals[0] and evals[0]["bayes_auc"] == 0.84 and evals[0]["rows"] == 1000
    assert (evals[1]["map_at_12"], evals[1]["groups"], evals[1]["bayes_map_at_12"]) == (0.6, 150, 0.64)
    assert "eval at step 2: AUC 0.80000" in stream.getvalue() and png and os.path.getsize(png) > 1000


def test_map_uses_logits_not_saturated_probabilities():
    logits = np.array([20.0, 25.0], np.float32)  # both sigmoid to 1.0 in float32
    assert score(np.array([0, 1], np.float32), logits, np.array([1, 1])).map_at_12 == 1.0
    probabilities = tf.sigmoid(logits).numpy()
    assert map_at_k([1, 1], [0, 1], probabilities) == 0.5  # what a tie would cost the click
