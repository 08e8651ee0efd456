"""Synthetic generator, multi-hot: bags of ids, a ground truth that pools them, exact Bayes AUC, presets."""
import json
import subprocess
import sys
from typing import NamedTuple

import numpy as np
import pytest

from dlrm.data.format.feature_spec import LABEL_CHANNEL, NUMERICAL_CHANNEL, FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.data.synthetic.click_model import ClickModel, bag_weights, build_click_model
from dlrm.data.synthetic.criteo import (
    MLPERF_HOTNESS,
    PRESET_NAMES,
    T0,
    TINY,
    cap_rows,
    preset_cardinalities,
    preset_hotness,
)
from dlrm.data.synthetic.generator import (
    GROUND_TRUTH_FILE,
    Tables,
    generate_atomically,
    generate_dataset,
    is_generated,
)
from dlrm.data.synthetic.lr_baseline import logistic_regression_auc
from dlrm.data.synthetic.sampling import GeneratorParams, bag_ids, sample_features
from dlrm.exact_metrics import exact_auc, log_loss_from_logits
from tests.support import ROOT
from tests.support.datasets import files_of

CARDS = [50, 3000, 7, 900, 400, 1]
HOTNESS = [1, 4, 1, 12, 2, 3]  # one-hot and multi-hot mixed, a one-row table among the bags
MLPERF = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)


def independent_logits(ground_truth: str, hotness, numerical, categorical):
    """The true logit of each row written out from the saved arrays alone (no ClickModel code): per
    table the mean of its ids' effects over the row's bag (padding and tail ids read the zero entry)."""
    with np.load(ground_truth) as z:
        arrays = dict(z)
    z = arrays["bias"] + (numerical.astype(np.float64) - arrays["numerical_center"]) @ arrays["numerical_weights"]
    pooled, start = {}, 0
    for t, h in enumerate(hotness):
        ids = categorical[:, start:start + h].astype(np.int64)
        start += h
        w = arrays[f"first_order_{t}"]
        valid = ids >= 0
        entry = np.where(valid, np.minimum(ids, w.size - 1), w.size - 1)
        size = np.maximum(valid.sum(axis=1), 1)
        z = z + w[entry].sum(axis=1) / size
        if f"vectors_{t}" in arrays:
            pooled[t] = arrays[f"vectors_{t}"][entry].sum(axis=1) / size[:, None]
    for p, q in arrays["pairs"]:
        z = z + (pooled[p] * pooled[q]).sum(axis=1)
    return z


# ----------------------------------------------------------------------------- presets
def test_mlperf_preset_has_the_dcnv2_hotness_and_40m_row_tables():
    assert "mlperf" in PRESET_NAMES and "mlperf_tiny" in PRESET_NAMES
    assert preset_hotness("mlperf") == preset_hotness("mlperf_tiny") == list(MLPERF) == list(MLPERF_HOTNESS)
    rows = preset_cardinalities("mlperf")
    assert max(rows) == 40_000_000 and rows.count(40_000_000) == 5  # tables 0, 9, 19, 20, 21 capped
    assert [r for r in rows if r < 40_000_000] == [c + 1 for c in T0 if c + 1 < 40_000_000]
    assert preset_cardinalities("mlperf", reserve_zero=False)[:3] == [40_000_000, 39060, 17295]
    assert preset_cardinalities("mlperf_tiny") == [c + 1 for c in TINY]
    for name in ("tiny", "t15", "t3", "t0"):
        assert preset_hotness(name) == [1] * 26, name
    assert max(preset_cardinalities("mlperf", max_rows=200_000)) == 200_000
    assert cap_rows([5, 50, 500], 40, None) == [5, 40, 40] and cap_rows([5, 50], None) == [5, 50]
    with pytest.raises(ValueError, match="unknown cardinality preset 'nope'"):
        preset_hotness("nope")


def test_tables_list_one_hot_features_first_and_keep_their_names():
    tables = Tables.of(CARDS, HOTNESS)
    assert tables.names == ("cat_0", "cat_2", "cat_1", "cat_3", "cat_4", "cat_5")
    assert tables.cardinalities == (50, 7, 3000, 900, 400, 1) and tables.hotness == (1, 1, 4, 12, 2, 3)
    assert Tables.of([4, 5]).hotness == (1, 1)
    with pytest.raises(ValueError, match="2 hotness values for 3 tables"):
        Tables.of([4, 5, 6], [1, 2])
    with pytest.raises(ValueError, match=">= 1"):
        Tables.of([4, 5], [1, 0])


# ----------------------------------------------------------------------------- sampling and pooling
def test_bags_hold_zero_to_max_hotness_ids_then_padding():
    params = GeneratorParams(empty_bag_rate=0.1)
    ids = bag_ids(np.random.default_rng(0), 20_000, 300, 5, params)
    assert ids.shape == (20_000, 5) and ids.dtype == np.int32
    valid = ids >= 0
    sizes = valid.sum(axis=1)
    assert np.array_equal(valid, np.arange(5)[None, :] < sizes[:, None])  # real ids first, -1 after
    assert ids[~valid].tolist() == [-1] * int((~valid).sum())
    assert ids[valid].min() >= 1 and ids[valid].max() < 300  # no 'missing' id 0 in a bag: an empty bag is that
    counts = np.bincount(sizes, minlength=6) / sizes.size
    assert abs(counts[0] - 0.1) < 0.01  # empty bags: the empty-bag rate
    assert all(abs(c - 0.9 / 5) < 0.01 for c in counts[1:])  # 1..5 ids equally likely
    assert np.bincount(ids[valid])[1] > np.bincount(ids[valid])[8] * 6  # Zipf-like within bags


def test_bag_weights_pool_the_mean_or_sum_and_ignore_padding():
    ids = np.array([[2, 2, 9], [1, -1, -1], [-1, -1, -1]])  # 9 is a tail id: entries 0..3, tail -> entry 3
    mean = bag_weights(ids, 4, "mean")
    assert mean.tolist() == [[0, 0, 2 / 3, 1 / 3], [0, 1, 0, 0], [0, 0, 0, 0]]
    assert bag_weights(ids, 4, "sum").tolist() == [[0, 0, 2, 1], [0, 1, 0, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize("pooling", ["mean", "sum"])
def test_click_model_pools_each_bag(pooling):
    """Each row's logit from ClickModel equals the pooled formula written out id by id."""
    params = GeneratorParams(bag_pooling=pooling, num_pairs=6)
    tables = Tables.of(CARDS, HOTNESS)
    model, log_means = build_click_model(tables.cardinalities, 3, 5, params, tables.hotness)
    numerical, categorical, _ = sample_features(np.random.SeedSequence(9), 300, tables.cardinalities,
                                                tables.hotness, log_means, params)
    assert len(model.pairs) == 6 and any(max(p, q) >= 2 for p, q in model.pairs)  # a bag table in a pair
    expected = np.full(300, model.bias) + (numerical - model.numerical_center) @ model.numerical_weights
    pooled = {}
    start = 0
    for t, h in enumerate(tables.hotness):
        w = model.first_order[t]
        for r in range(300):
            bag = [min(int(i), w.size - 1) for i in categorical[r, start:start + h] if i >= 0]
            divide = max(len(bag), 1) if pooling == "mean" else 1
            expected[r] += sum(w[i] for i in bag) / divide
            if t in model.vectors:
                pooled[t, r] = sum((model.vectors[t][i] for i in bag), np.zeros(4)) / divide
        start += h
    for p, q in model.pairs:
        expected += [pooled[p, r] @ pooled[q, r] for r in range(300)]
    np.testing.assert_allclose(model.click_logits(numerical, categorical), expected, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- datasets
@pytest.fixture(scope="module")
def multihot_dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("multihot")
    spec = generate_dataset(str(out), CARDS, train_rows=6000, test_rows=20_000, seed=11, num_numerical=5,
                            hotness=HOTNESS)
    return out, spec


class Rows(NamedTuple):
    label: np.ndarray
    numerical: np.ndarray
    categorical: np.ndarray  # [n, total hotness], tables in the spec's order


def read_all(directory, mapping):
    """A mapping's rows read from its files as the spec lays them out (label, numerical, one array per table)."""
    spec = FeatureSpec.load(str(directory)).validate()
    n = spec.num_rows(mapping)
    columns = {LABEL_CHANNEL: [], NUMERICAL_CHANNEL: [np.zeros((n, 0), np.float16)], "tables": []}
    for chunk in spec.binary_chunks(mapping):
        values = np.fromfile(chunk.path, dtype=chunk.dtype).reshape(n, -1)
        columns.get(chunk.channel, columns["tables"]).append(values)
    return spec, Rows(columns[LABEL_CHANNEL][0][:, 0], np.hstack(columns[NUMERICAL_CHANNEL]),
                      np.hstack(columns["tables"]).astype(np.int32))


def test_multihot_dataset_reads_back_with_its_spec(multihot_dataset):
    out, _ = multihot_dataset
    spec, test = read_all(out, "test")
    batch = BatchReader(spec, "test", 20_000, prefetch=0).read_batch(0)  # the trainer's reader agrees
    assert np.array_equal(batch.categorical, test.categorical) and np.array_equal(batch.label, test.label)
    assert np.array_equal(batch.numerical, test.numerical.astype(np.float32))
    features = spec.feature_spec
    for i, (card, hot) in enumerate(zip(CARDS, HOTNESS)):
        assert features[f"cat_{i}"]["cardinality"] == card
        assert features[f"cat_{i}"].get("max_hotness", 1) == hot
    assert spec.channel_spec["multihot_categorical"] == ["cat_1", "cat_3", "cat_4", "cat_5"]
    assert spec.numerical_names == [f"num_{j}" for j in range(5)] and test.numerical.shape == (20_000, 5)
    assert test.categorical.shape == (20_000, sum(HOTNESS))
    bounds = np.cumsum([0, 1, 1, 4, 12, 2, 3])
    for t, card in enumerate(Tables.of(CARDS, HOTNESS).cardinalities):
        ids = test.categorical[:, bounds[t]:bounds[t + 1]]
        valid = ids >= 0
        assert (ids[valid] < card).all() and (ids[~valid] == -1).all()
        assert np.array_equal(valid, np.arange(ids.shape[1]) < valid.sum(axis=1, keepdims=True))
        if ids.shape[1] > 1:
            sizes = valid.sum(axis=1)
            assert sizes.min() == 0 and sizes.max() == ids.shape[1]  # empty and full bags both occur
        else:
            assert valid.all()  # a one-hot id is never padding


def test_multihot_bayes_auc_is_exact(multihot_dataset):
    """Recomputed from the saved hidden model on the stored test rows, independently of the generator."""
    out, spec = multihot_dataset
    meta = FeatureSpec.load(str(out)).metadata
    _, test = read_all(out, "test")
    hotness = Tables.of(CARDS, HOTNESS).hotness
    logits = independent_logits(str(out / GROUND_TRUTH_FILE), hotness, test.numerical, test.categorical)
    assert exact_auc(test.label, logits) == pytest.approx(meta["bayes_auc"], abs=1e-9)
    assert log_loss_from_logits(test.label, logits) == pytest.approx(meta["bayes_logloss"], abs=1e-9)
    model = ClickModel.load(str(out / GROUND_TRUTH_FILE))
    assert model.table_hotness == list(hotness) and model.bag_pooling == "mean"
    assert exact_auc(test.label, model.click_logits(test.numerical, test.categorical)) == meta["bayes_auc"]
    assert 0.7 < meta["bayes_auc"] < 0.9 and abs(float(test.label.mean()) - 0.25) < 0.02


def test_logistic_regression_learns_from_bags(multihot_dataset):
    out, _ = multihot_dataset
    result = logistic_regression_auc(FeatureSpec.load(str(out)), epochs=2)
    assert 0.6 < result["lr_auc"] < result["bayes_auc"] + 0.005


def test_multihot_dataset_without_numerical_features(tmp_path):
    generate_dataset(str(tmp_path), CARDS, 2000, 4000, seed=4, num_numerical=0, hotness=HOTNESS)
    spec, test = read_all(tmp_path, "test")
    assert spec.numerical_names == [] and test.numerical.shape == (4000, 0)
    logits = independent_logits(str(tmp_path / GROUND_TRUTH_FILE), Tables.of(CARDS, HOTNESS).hotness,
                                test.numerical, test.categorical)
    assert exact_auc(test.label, logits) == pytest.approx(spec.metadata["bayes_auc"], abs=1e-9)
    assert is_generated(str(tmp_path), CARDS, 2000, 4000, 4, HOTNESS)
    assert not is_generated(str(tmp_path), CARDS, 2000, 4000, 4)  # the one-hot dataset of these tables
    assert not is_generated(str(tmp_path), CARDS, 2000, 4000, 4, [1, 4, 1, 12, 2, 2])


def test_a_cached_one_hot_dataset_is_not_taken_for_the_multihot_one(tmp_path):
    """The embedded demo's reuse check: same tables and seed, other hotness -> generated anew, atomically."""
    directory = tmp_path / "data"
    generate_atomically(str(directory), CARDS, 500, 200, 1)
    assert is_generated(str(directory), CARDS, 500, 200, 1) and not is_generated(str(directory), CARDS, 500, 200, 1,
                                                                                 HOTNESS)
    generate_atomically(str(directory), CARDS, 500, 200, 1, HOTNESS)
    assert is_generated(str(directory), CARDS, 500, 200, 1, HOTNESS)
    assert not is_generated(str(directory), CARDS, 500, 200, 1)
    assert list(tmp_path.iterdir()) == [directory]


def test_multihot_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        generate_dataset(str(tmp_path / name), CARDS, 3000, 1000, seed=seed, num_numerical=2, hotness=HOTNESS)
        runs[name] = files_of(tmp_path / name)
    assert runs["a"].keys() == runs["b"].keys() and GROUND_TRUTH_FILE in runs["a"]
    for name in runs["a"]:
        if name != "feature_spec.yaml":  # holds the generation time
            assert runs["a"][name] == runs["b"][name], name
    cat_files = [name for name in runs["a"] if name.startswith("train/cat_")]
    assert len(cat_files) == len(CARDS)
    assert all(runs["a"][name] != runs["c"][name] for name in cat_files + ["train/label.bin"])


def test_cli_hotness_and_max_rows(tmp_path):
    out = tmp_path / "d"
    result = subprocess.run([sys.executable, "-m", "dlrm.data.synthetic", "--out", str(out), "--preset", "mlperf",
                             "--max_rows", "5000", "--num_numerical", "0", "--train_rows", "3000",
                             "--test_rows", "2000"], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert 0.6 < json.loads(result.stdout)["bayes_auc"] < 0.95
    spec = FeatureSpec.load(str(out)).validate()
    features = spec.feature_spec
    assert [features[f"cat_{i}"].get("max_hotness", 1) for i in range(26)] == list(MLPERF)
    assert [features[f"cat_{i}"]["cardinality"] for i in range(26)] == preset_cardinalities("mlperf", max_rows=5000)
    assert spec.metadata["generator"]["preset"] == "mlperf" and spec.numerical_names == []

    own = subprocess.run([sys.executable, "-m", "dlrm.data.synthetic", "--out", str(tmp_path / "e"),
                          "--cardinalities", "100,40,9", "--hotness", "1,3,1", "--train_rows", "500",
                          "--test_rows", "100"], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert own.returncode == 0, own.stderr
    spec = FeatureSpec.load(str(tmp_path / "e")).validate()
    assert spec.channel_spec["multihot_categorical"] == ["cat_1"] and spec.feature_spec["cat_1"]["max_hotness"] == 3


@pytest.mark.parametrize("flags, source", [
    (["--cardinalities", "100,40,9", "--hotness", "1,3"], "--cardinalities has 3"),
    (["--preset", "mlperf_tiny", "--hotness", "2"], "--preset mlperf_tiny has 26"),
])
def test_cli_refuses_a_hotness_list_of_the_wrong_length(tmp_path, flags, source):
    result = subprocess.run([sys.executable, "-m", "dlrm.data.synthetic", "--out", str(tmp_path / "d")] + flags,
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"argument --hotness: expected one value per table: {source} tables" in result.stderr
    assert not (tmp_path / "d").exists()
