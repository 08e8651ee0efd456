"""Wide & Deep synthetic click log: deterministic, one click per display of 2..12 ads, the reference's
day split, the reference's features, Bayes values reproduced from the ground truth, every signal matters (the
per-id and per-pair memorisation, the generalisation)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from dlrm.data.format.contract import contract_from_spec
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.data.synthetic.presets import WIDEDEEP_PRESETS
from dlrm.data.synthetic.widedeep_generator import GROUND_TRUTH_FILE, generate_widedeep, is_widedeep_generated
from dlrm.data.synthetic.widedeep_model import PAIR_FEATURES, WideDeepTruth
from dlrm.data.synthetic.widedeep_reference import FEATURES, GROUP_FEATURE, LABEL, NUMERICAL_FEATURES
from dlrm.exact_metrics import exact_auc, log_loss_from_logits, map_at_k
from tests.support import ROOT
from tests.support.datasets import files_of

ROWS = 40_000


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    out = tmp_path_factory.mktemp("widedeep")
    spec = generate_widedeep(str(out), "widedeep_tiny", ROWS, seed=3)
    loaded = FeatureSpec.load(str(out)).validate()
    read = {m: BatchReader(loaded, m, loaded.num_rows(m), prefetch=0).read_batch(0) for m in ("train", "test")}
    return out, spec, loaded, read


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        generate_widedeep(str(tmp_path / name), "widedeep_tiny", 3000, seed=seed)
    fa, fb, fc = files_of(tmp_path / "a"), files_of(tmp_path / "b"), files_of(tmp_path / "c")
    assert fa.keys() == fb.keys() and "train/group.bin" in fa and GROUND_TRUTH_FILE in fa
    for name in fa:
        if name != "feature_spec.yaml":  # holds the generation time
            assert fa[name] == fb[name], name
    assert fa["train/label.bin"] != fc["train/label.bin"] and fa["test/cat_0.bin"] != fc["test/cat_0.bin"]


def test_the_reference_features(log):
    _, _, spec, _ = log
    assert spec.label_name == LABEL and spec.numerical_names == list(NUMERICAL_FEATURES)
    assert spec.group_name == GROUP_FEATURE and sorted(spec.mappings) == ["test", "train"]
    assert spec.categorical_names == [f.name for f in FEATURES]
    assert spec.hotnesses == [f.hotness for f in FEATURES] and max(spec.hotnesses) <= 3
    assert spec.cardinalities == [min(f.cardinality, WIDEDEEP_PRESETS["widedeep_tiny"].max_rows or f.cardinality)
                                  for f in FEATURES]
    contract = contract_from_spec(spec, embedding_dim=16)
    assert [t.dim for t in contract.tables] == [f.dim for f in FEATURES]  # the reference's dims, 1235 in all
    assert sum(t.dim for t in contract.tables) == 1235


def test_one_click_per_display_of_2_to_12_ads(log):
    _, spec, _, read = log
    for mapping, batch in read.items():
        displays, sizes = np.unique(batch.group, return_counts=True)
        assert 2 <= sizes.min() and sizes.max() <= 12
        clicks = np.bincount(np.searchsorted(displays, batch.group), weights=batch.label)
        assert (clicks == 1).all(), mapping
        assert spec.metadata["num_displays"][mapping] == displays.size
        # each display's rows are adjacent in both mappings
        assert (np.diff(batch.group) != 0).sum() == displays.size - 1
    assert sum(spec.metadata["num_rows"].values()) - ROWS in range(0, 12)


def test_the_split_rule(log):
    _, spec, _, read = log
    train, test = read["train"].group, read["test"].group
    assert not np.intersect1d(train, test).size  # no display in both
    assert (np.diff(test) >= 0).all()  # test ordered by display id
    assert (np.diff(train) != 0).any() and not (np.diff(train) >= 0).all()  # train in a shuffled display order
    # display ids increase with the day, days 11-12 only in test: the last ~1/6 of all ids are all test ids
    everything = np.union1d(train, test)
    late = everything[int(everything.size * (1 - 1.5 / 12)):]  # well inside days 11-12
    assert np.isin(late, test).all()
    early = everything[: everything.size // 2]  # days 1-6: ~80% train
    assert 0.75 < np.isin(early, train).mean() < 0.85
    train_share = spec.metadata["num_rows"]["train"] / sum(spec.metadata["num_rows"].values())
    assert 0.62 < train_share < 0.72  # 10/12 * 0.8 = 2/3


def test_ids_in_range_and_bags_padded_at_the_end(log):
    _, _, spec, read = log
    for batch in read.values():
        start = 0
        for card, hot in zip(spec.cardinalities, spec.hotnesses):
            ids = batch.categorical[:, start:start + hot]
            start += hot
            assert ids.max() < card and (ids >= -1).all()
            if hot == 1:
                assert (ids >= 0).all()
            else:
                padded = ids == -1
                assert not (padded[:, :-1] & ~padded[:, 1:]).any()  # no id after a -1
                assert padded.all(axis=1).any() and (~padded).all(axis=1).any()  # empty and full bags occur
        assert ((batch.numerical >= 0) & (batch.numerical <= 1)).all()


def test_bayes_values_reproduce_from_the_ground_truth(log):
    out, spec, _, read = log
    truth = WideDeepTruth.load(str(out / GROUND_TRUTH_FILE))
    test = read["test"]
    score = truth.scores(test.numerical, test.categorical)
    meta = spec.metadata
    assert map_at_k(test.group, test.label, score) == pytest.approx(meta["bayes_map_at_12"], abs=1e-12)
    # the true click probability: softmax of the score over the display's ads
    starts = np.flatnonzero(np.concatenate(([True], np.diff(test.group) != 0)))
    display = np.cumsum(np.concatenate(([0], (np.diff(test.group) != 0).astype(int))))
    p = np.exp(score) / np.add.reduceat(np.exp(score), starts)[display]
    assert np.add.reduceat(p, starts) == pytest.approx(1.0)
    logits = np.log(p) - np.log1p(-p)
    assert exact_auc(test.label, logits) == pytest.approx(meta["bayes_auc"], abs=1e-9)
    assert log_loss_from_logits(test.label, logits) == pytest.approx(meta["bayes_logloss"], rel=1e-6)
    for part in ("memorisation", "pair_memorisation"):
        ablated = map_at_k(test.group, test.label, truth.scores(test.numerical, test.categorical, [part]))
        assert ablated == pytest.approx(meta["ablation_map_at_12"][f"without_{part}"], abs=1e-12)


def test_both_signals_matter(log):
    _, spec, _, _ = log
    bayes, ablation = spec.metadata["bayes_map_at_12"], spec.metadata["ablation_map_at_12"]
    for name in ("without_memorisation", "without_pair_memorisation", "without_generalisation", "linear_only"):
        assert ablation[name] < bayes - 0.02, name
    assert ablation["linear_only"] < ablation["linear_with_crosses"] - 0.02  # what the crosses add to a linear model
    assert spec.metadata["pair_features"] == [list(pair) for pair in PAIR_FEATURES]
    assert ablation["without_numerical_nonlinear"] < bayes - 0.01  # a smaller part, for the deep MLP too
    assert ablation["chance"] < min(ablation.values()) + 1e-9 and bayes > 0.7


def test_reuse_check_and_cli(tmp_path):
    result = subprocess.run([sys.executable, "-m", "dlrm.data.synthetic", "--out", str(tmp_path / "d"),
                             "--preset", "widedeep_tiny", "--train_rows", "2000", "--test_rows", "1000", "--seed", "5"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert 0.5 < summary["bayes_map_at_12"] <= 1 and sum(summary["num_rows"].values()) in range(3000, 3012)
    assert is_widedeep_generated(str(tmp_path / "d"), "widedeep_tiny", 3000, 5)
    assert not is_widedeep_generated(str(tmp_path / "d"), "widedeep_tiny", 3000, 6)
    assert not is_widedeep_generated(str(tmp_path / "d"), "widedeep", 3000, 5)
    refused = subprocess.run([sys.executable, "-m", "dlrm.data.synthetic", "--out", str(tmp_path / "e"),
                              "--preset", "widedeep_tiny", "--hotness", "1"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert refused.returncode == 2 and "--hotness: not used by --preset widedeep_tiny" in refused.stderr


def test_the_trainer_generates_and_reuses_widedeep_tiny(tmp_path):
    from dlrm.cli import parse_config
    from dlrm.dist import single_process
    from dlrm.train.dataset import prepare_dataset
    from dlrm.train.metrics_log import MetricsLog

    config = parse_config(["--synthetic_preset", "widedeep_tiny", "--synthetic_dir", str(tmp_path / "wd"),
                           "--synthetic_train_rows", "2000", "--synthetic_test_rows", "1000"])
    directory = prepare_dataset(config.data, single_process(), MetricsLog("", enabled=False))
    spec = FeatureSpec.load(directory).validate()
    assert spec.metadata["generator"]["preset"] == "widedeep_tiny" and spec.group_name == GROUP_FEATURE
    stamp = (tmp_path / "wd" / "train" / "label.bin").stat().st_mtime_ns
    prepare_dataset(config.data, single_process(), MetricsLog("", enabled=False))  # reused, not generated again
    assert (tmp_path / "wd" / "train" / "label.bin").stat().st_mtime_ns == stamp


def test_the_sweep_table_knows_the_widedeep_tables():
    from dlrm.launch.collect import run_tables

    config = {"data": {"dataset_dir": None, "synthetic_preset": "widedeep"},
              "model": {"embedding_dim": 16, "combiner": "sum"}}
    tables = run_tables(config, None)
    assert [(t.name, t.rows, t.dim, t.hotness) for t in tables] == [(f.name, f.cardinality, f.dim, f.hotness)
                                                                     for f in FEATURES]
