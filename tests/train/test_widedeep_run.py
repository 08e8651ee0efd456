"""`--arch widedeep` through the trainer's real path (flags -> `run`, as main.py): it trains on a
small one-hot / multi-hot dataset (with two crossed features in the wide part), logs both learning rates
and the parameter count, checkpoints both optimizer groups' slots and state (the crosses' too), resumes
bit-identically, evaluates, and times steps with --benchmark."""
import json
import os
import shutil

import numpy as np
import pytest

from dlrm.cli import parse_config
from dlrm.train import checkpoint
from dlrm.train.metrics_log import read_metrics
from dlrm.train.run import run
from tests.data.mixed_dataset import write_mixed
from tests.support.runs import assert_same_final_weights

ROWS = 400  # batches of 64: 6 full + one of 16 per epoch
STEPS = 7  # one epoch
STEP = ["--arch", "widedeep", "--embedding_dim", "4", "--global_batch_size", "64", "--num_epochs", "1",
        "--intra_op_threads", "2", "--seed", "4"]  # what --benchmark takes too
COMMON = STEP + ["--valid_batch_size", "256", "--log_every", "1"]
DEEP = ["--deep_hidden_units", "16", "8", "--deep_warmup_epochs", "0.5", "--deep_learning_rate", "0.01"]
WIDE = ["--linear_learning_rate", "0.1", "--wide_crosses", "cat_0:cat_1,cat_1:cat_2", "--wide_cross_buckets",
        "4096"]  # one cross exact, one hashed
FLAGS = COMMON + DEEP + WIDE


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("wd_data")
    write_mixed(root, ROWS, seed=2, mappings=("train", "test"))
    return str(root)


def _run(dataset, run_dir, *flags):
    return run(parse_config(["--dataset_path", dataset, "--run_dir", str(run_dir), *FLAGS, *flags]))


@pytest.fixture(scope="module")
def full_run(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("wd_full")
    result = _run(dataset, root / "run", "--checkpoint_every", "4", "--keep_checkpoints", "10",
                  "--save_checkpoint_path", str(root / "ckpt"))
    return result, root


def test_trains_logs_both_rates_and_checkpoints_both_groups(full_run, capsys):
    result, root = full_run
    assert result.step == STEPS and result.auc is not None and 0.0 <= result.auc <= 1.0
    records = read_metrics(str(root / "run" / "metrics.jsonl"))
    train = [r for r in records if r["kind"] == "train"]
    losses = [r["loss"] for r in train]
    assert len(train) == STEPS and all(np.isfinite(losses))
    # warmup over half an epoch (3.5 steps), base/4 to epoch 0.5 + 0.25 (step 5.25), then base/8
    assert [r["lr_deep"] for r in train] == pytest.approx([0.0, 0.01 / 3.5, 0.02 / 3.5, 0.03 / 3.5, 0.0025, 0.0025,
                                                          0.00125])
    assert train[-1]["lr"] == train[-1]["lr_deep"]
    assert {r["lr_wide"] for r in train} == {0.1}
    meta = checkpoint.read_meta(checkpoint.find_checkpoint(str(root / "ckpt")))
    assert meta["optimizer"]["name"] == "ftrl+rmsprop" and meta["model_shape"]["arch"] == "widedeep"
    names = [t["name"] for t in meta["model_shape"]["tables"]]
    assert names[6:] == [f"{n}_wide" for n in names[:6]] + ["cat_0_x_cat_1_wide", "cat_1_x_cat_2_wide"]
    arrays = checkpoint.read_arrays(str(root / "ckpt"))
    assert {"embedding/cat_0_wide/accumulator", "embedding/cat_0_wide/linear", "embedding/cat_0/rms"} <= set(arrays)
    assert arrays["embedding/topics_wide/value"].shape == (40, 1)
    assert any(k.endswith("optimizer.wide.iterations") for k in arrays)
    assert any(k.endswith("optimizer.deep.iterations") for k in arrays)
    assert np.any(arrays["embedding/cat_1_wide/value"])  # the wide part moved off zero
    assert arrays["embedding/cat_0_x_cat_1_wide/value"].shape == (5 * 300, 1)  # exact: every pair its row
    assert arrays["embedding/cat_1_x_cat_2_wide/value"].shape == (4096, 1)  # hashed
    for cross in ("cat_0_x_cat_1_wide", "cat_1_x_cat_2_wide"):  # trained by FTRL like the other wide tables
        assert np.any(arrays[f"embedding/{cross}/value"]) and f"embedding/{cross}/linear" in arrays


def test_resume_from_a_mid_run_checkpoint_ends_bit_identical(dataset, full_run, tmp_path):
    _, root = full_run
    step_dir = root / "ckpt" / checkpoint.step_dir_name(4)
    shutil.copytree(step_dir, tmp_path / "ckpt" / step_dir.name)
    (tmp_path / "ckpt" / checkpoint.LATEST).write_text(step_dir.name + "\n")
    result = _run(dataset, tmp_path / "run", "--checkpoint_every", "4",
                  "--save_checkpoint_path", str(tmp_path / "ckpt"))
    assert result.step == STEPS
    assert_same_final_weights(str(root / "ckpt"), str(tmp_path / "ckpt"), step=STEPS)


def _evaluate(dataset, run_dir, checkpoint_root, *flags):
    """--evaluate with the dataset and the checkpoint only: the model comes from the checkpoint."""
    return run(parse_config(["--dataset_path", dataset, "--run_dir", str(run_dir), "--evaluate",
                             "--restore_checkpoint_path", str(checkpoint_root), *flags]))


def test_evaluate_flag_scores_the_checkpoint(dataset, full_run, tmp_path):
    result, root = full_run
    evaluated = _evaluate(dataset, tmp_path / "run", root / "ckpt", "--valid_batch_size", "256")
    assert evaluated.mode == "eval" and evaluated.step == STEPS and evaluated.auc == pytest.approx(result.auc)


def test_a_wide_only_checkpoint_evaluates_without_deep_flags(dataset, tmp_path):
    trained = run(parse_config(["--dataset_path", dataset, "--run_dir", str(tmp_path / "run"), *COMMON, *WIDE,
                                "--model_type", "wide", "--max_steps", "2",
                                "--save_checkpoint_path", str(tmp_path / "ckpt")]))
    evaluated = _evaluate(dataset, tmp_path / "run", tmp_path / "ckpt")
    assert evaluated.step == 2 and evaluated.auc == pytest.approx(trained.auc)


def test_benchmark_times_training_steps_and_stops(dataset, tmp_path, capsys):
    result = run(parse_config(["--dataset_path", dataset, "--run_dir", str(tmp_path / "run"), *STEP, *DEEP, *WIDE,
                               "--benchmark", "--benchmark_warmup_steps", "2", "--benchmark_steps", "3"]))
    assert result.mode == "train" and result.step == 5 and result.samples_per_sec > 0
    assert result.extra["timed_steps"] == 3 and result.checkpoint is None
    out = capsys.readouterr().out
    assert "samples/s over 3 steps of 64 rows" in out
    assert "trainable parameters" in out
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        kinds = [json.loads(line)["kind"] for line in f]
    assert "train_benchmark" in kinds and "eval" not in kinds
    assert not os.path.exists(tmp_path / "ckpt")


@pytest.mark.parametrize("model_type, rate", [("deep", "lr_deep"), ("wide", "lr_wide")])
def test_one_part_models_log_only_their_part_s_rate(dataset, tmp_path, model_type, rate):
    part = DEEP + ["--deep_warmup_epochs", "0.1"] if model_type == "deep" else WIDE  # each part's own flags
    result = run(parse_config(["--dataset_path", dataset, "--run_dir", str(tmp_path / "run"), *COMMON, *part,
                               "--model_type", model_type, "--num_epochs", "0.3"]))
    train = [r for r in read_metrics(str(tmp_path / "run" / "metrics.jsonl")) if r["kind"] == "train"]
    assert result.step == len(train) > 0
    assert {k for k in train[-1] if k.startswith("lr_")} == {rate}
    assert all(r["lr"] == r[rate] for r in train)
