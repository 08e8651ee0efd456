"""Synthetic generator: deterministic, Zipf-like ids, recorded ground truth, learnable (LR beats chance)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.data.synthetic.click_model import ClickModel
from dlrm.data.synthetic.criteo import preset_cardinalities
from dlrm.data.synthetic.generator import GROUND_TRUTH_FILE, generate_dataset
from dlrm.data.synthetic.lr_baseline import logistic_regression_auc
from dlrm.data.synthetic.sampling import zipf_ids
from dlrm.exact_metrics import exact_auc
from tests.support import ROOT
from tests.support.datasets import files_of

TINY = preset_cardinalities("tiny")


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    spec = generate_dataset(str(out), TINY, train_rows=120_000, test_rows=40_000, seed=7, preset="tiny")
    return out, spec


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a = generate_dataset(str(tmp_path / "a"), TINY[:5], 3000, 1000, seed=1)
    b = generate_dataset(str(tmp_path / "b"), TINY[:5], 3000, 1000, seed=1)
    c = generate_dataset(str(tmp_path / "c"), TINY[:5], 3000, 1000, seed=2)
    fa, fb, fc = files_of(tmp_path / "a"), files_of(tmp_path / "b"), files_of(tmp_path / "c")
    assert fa.keys() == fb.keys() and "train/cat_4.bin" in fa and GROUND_TRUTH_FILE in fa
    for name in fa:
        if name != "feature_spec.yaml":  # holds the generation time
            assert fa[name] == fb[name], name
    assert a.metadata["bayes_auc"] == b.metadata["bayes_auc"]
    assert fa["train/label.bin"] != fc["train/label.bin"] and fa["train/cat_0.bin"] != fc["train/cat_0.bin"]
    assert a.metadata["bayes_auc"] != c.metadata["bayes_auc"]


def test_metadata_records_the_ground_truth(tiny_dataset):
    out, spec = tiny_dataset
    loaded = FeatureSpec.load(str(out)).validate()
    meta = loaded.metadata
    assert meta["num_rows"] == {"train": 120_000, "test": 40_000} and meta["seed"] == 7
    assert 0.75 <= meta["bayes_auc"] <= 0.87
    assert 0.2 <= meta["positive_rate"]["train"] <= 0.3 and 0.2 <= meta["positive_rate"]["test"] <= 0.3
    generator = meta["generator"]
    assert generator["params"]["head_ids"] > 0 and len(generator["pairs"]) == generator["params"]["num_pairs"]
    assert loaded.cardinalities == TINY
    # the saved hidden model reproduces the recorded Bayes AUC from the stored test features
    model = ClickModel.load(str(out / GROUND_TRUTH_FILE))
    test = BatchReader(loaded, "test", 40_000, prefetch=0).read_batch(0)
    logits = model.click_logits(test.numerical, test.categorical)
    assert exact_auc(test.label, logits) == pytest.approx(meta["bayes_auc"], abs=1e-12)
    assert abs(float(np.mean(1 / (1 + np.exp(-logits)))) - float(test.label.mean())) < 0.01


def test_ids_follow_a_zipf_like_law():
    rng = np.random.default_rng(0)
    ids = zipf_ids(rng, 200_000, 4001, exponent=1.2, missing_rate=0.02)
    assert ids.min() == 0 and ids.max() <= 4000
    counts = np.bincount(ids, minlength=4001)
    assert abs(counts[0] / ids.size - 0.02) < 0.003  # id 0 = missing
    head = counts[1:11]
    assert np.all(np.diff(head) < 0)  # id 1 most frequent, decreasing
    # P(k) ~ k^-1.2: the ratio of counts of ids 1 and 8 is about 8^1.2 (continuous approximation)
    assert 6 < counts[1] / counts[8] < 14
    assert zipf_ids(rng, 10, 1, 1.2, 0.0).tolist() == [0] * 10


def test_logistic_regression_clearly_beats_chance(tiny_dataset):
    out, spec = tiny_dataset
    result = logistic_regression_auc(FeatureSpec.load(str(out)), epochs=2)
    print(f"logistic regression AUC {result['lr_auc']:.4f} vs Bayes AUC {result['bayes_auc']:.4f}")
    assert result["lr_auc"] > 0.70  # chance is 0.5
    assert result["lr_auc"] < result["bayes_auc"] + 0.005  # nothing beats the true model


def test_huge_tables_need_no_per_id_memory(tmp_path):
    cards = preset_cardinalities("t0")  # largest table 227.6M rows
    spec = generate_dataset(str(tmp_path), cards, 2000, 500, seed=3)
    assert spec.dtype("cat_0") == np.int32
    batch = BatchReader(FeatureSpec.load(str(tmp_path)), "train", 2000, prefetch=0).read_batch(0)
    assert (batch.categorical.max(axis=0) < np.asarray(cards)).all()
    assert (batch.categorical[:, 0] > 1000).mean() > 0.2  # the long tail is reached


def test_cli(tmp_path):
    result = subprocess.run([sys.executable, "-m", "dlrm.data.synthetic", "--out", str(tmp_path / "d"),
                             "--preset", "tiny", "--train_rows", "5000", "--test_rows", "2000", "--seed", "9"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert 0.6 < summary["bayes_auc"] < 0.95
    spec = FeatureSpec.load(str(tmp_path / "d")).validate()
    assert spec.num_rows("train") == 5000 and spec.metadata["generator"]["preset"] == "tiny"
