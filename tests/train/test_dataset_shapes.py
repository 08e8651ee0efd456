"""Datasets of any shape train through main.py: 0, 1, 5 and 13 numerical features, 1 to 30 categorical
ones, per-table dims in the spec; NVIDIA-style spec variants train or are refused with one message naming
the rule (no traceback).

A run that trains calls main.py's own entry point (`dlrm.cli.main`: exit status, stdout, stderr) in this
process; a refusal, whose exit status and stderr are the point, runs main.py in a process of its own."""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import yaml

from dlrm.data.synthetic.generator import generate_dataset
from dlrm.train import checkpoint
from dlrm.train.metrics_log import read_metrics
from tests.support import ROOT
from tests.support.runs import main_in_process

# A tiny model and a few steps: a few seconds per run.
FLAGS = ["--global_batch_size", "256", "--valid_batch_size", "500", "--embedding_dim", "4", "--bottom_mlp_dims",
         "8-4", "--top_mlp_dims", "8-1", "--optimizer", "adam",
         "--learning_rate", "0.01", "--warmup_steps", "0", "--decay_steps", "0", "--max_steps", "3",
         "--log_every", "1", "--intra_op_threads", "1", "--skip_data_validation"]
DCN = ["--arch", "dcnv2", "--dcn_num_layers", "1", "--dcn_low_rank_dim", "4"]


def cardinalities(count):
    return [3 + (7 * i) % 23 for i in range(count)]


def make_dataset(path, num_numerical, num_categorical):
    generate_dataset(str(path), cardinalities(num_categorical), train_rows=1000, test_rows=500, seed=3,
                     num_numerical=num_numerical)
    return str(path)


def main_py(dataset, run_dir, *extra):
    """main.py on `dataset` in a process of its own: (exit status, stdout, stderr)."""
    command = [sys.executable, os.path.join(ROOT, "main.py"), "--dataset_path", dataset, "--run_dir", str(run_dir),
               *FLAGS, *extra]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=240)
    return done.returncode, done.stdout, done.stderr


def main_here(capfd, dataset, run_dir, *extra):
    """main.py's entry point on `dataset` in this process: (exit status, stdout, stderr)."""
    done = main_in_process(capfd, ["--dataset_path", dataset, "--run_dir", run_dir, *FLAGS, *extra])
    return done.returncode, done.stdout, done.stderr


def assert_trained(status, stdout, stderr, run_dir, num_numerical, names):
    assert status == 0, stdout[-2000:] + stderr[-2000:]
    records = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    losses = [r["loss"] for r in records if r["kind"] == "train"]
    assert len(losses) == 3 and all(np.isfinite(losses)), losses
    assert [r for r in records if r["kind"] == "eval"][-1]["step"] == 3
    features = [r for r in records if r["kind"] == "features"][0]
    assert len(features["numerical"]) == num_numerical and [t["name"] for t in features["tables"]] == names
    assert f"{num_numerical} numerical features, {len(names)} tables" in stdout
    assert "tables: " + ", ".join(f"{name} (" for name in names[:1]) in stdout


def assert_refused(status, stdout, stderr, message):
    """One `error:` message (its lines may list problems) carrying `message`, exit status 1, no traceback."""
    assert status == 1, stdout[-2000:] + stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in stderr[stderr.index(errors[0]):], stderr[-2000:]
    assert "Traceback" not in stderr


@pytest.mark.parametrize("num_numerical, num_categorical, arch", [
    (0, 2, "dlrm"), (0, 1, "dcnv2"), (1, 1, "dlrm"), (5, 26, "dlrm"), (5, 2, "dcnv2"), (13, 30, "dlrm"),
])
def test_datasets_of_any_shape_train_through_main(tmp_path, capfd, num_numerical, num_categorical, arch):
    """5 numerical features used to pass validation and then die in the first step (a tf.function
    TypeError for the batch's [B, 5] numerical array against the model's [None, 13])."""
    dataset = make_dataset(tmp_path / "data", num_numerical, num_categorical)
    outcome = main_here(capfd, dataset, tmp_path / "run", *(DCN if arch == "dcnv2" else ["--arch", arch]))
    assert_trained(*outcome, str(tmp_path / "run"), num_numerical, [f"cat_{i}" for i in range(num_categorical)])


def edit_spec(dataset, change):
    path = os.path.join(dataset, "feature_spec.yaml")
    with open(path) as f:
        spec = yaml.safe_load(f)
    change(spec)
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)


def set_dims(dims):
    def change(spec):
        for name, dim in dims.items():
            spec["feature_spec"][name]["embedding_dim"] = dim
    return change


def test_per_table_dims_train_dcnv2_and_the_dot_interaction_names_the_tables_it_refuses(tmp_path, capfd):
    dataset = make_dataset(tmp_path / "data", 3, 3)
    edit_spec(dataset, set_dims({"cat_1": 6, "cat_2": 2}))
    with ThreadPoolExecutor(max_workers=1) as pool:  # the refusal's process runs beside the training
        refused = pool.submit(main_py, dataset, tmp_path / "dlrm")
        status, stdout, stderr = main_here(capfd, dataset, tmp_path / "dcn", *DCN, "--save_checkpoint_path",
                                           str(tmp_path / "ckpt"))
    assert_trained(status, stdout, stderr, str(tmp_path / "dcn"), 3, ["cat_0", "cat_1", "cat_2"])
    meta = checkpoint.read_meta(checkpoint.find_checkpoint(str(tmp_path / "ckpt")))
    assert [(t["name"], t["dim"]) for t in meta["model_shape"]["tables"]] == [("cat_0", 4), ("cat_1", 6), ("cat_2", 2)]
    assert checkpoint.read_arrays(str(tmp_path / "ckpt"))["embedding/cat_1/value"].shape == (10, 6)
    assert_refused(*refused.result(),
                   "every table's dim must equal the bottom MLP's last layer (4, --bottom_mlp_dims); differing: "
                   "'cat_1' (dim 6), 'cat_2' (dim 2)")


def drop_channel(channel):
    """The spec without `channel`'s features (their files stay, unreferenced)."""
    def change(spec):
        names = spec["channel_spec"].pop(channel)
        for name in names:
            del spec["feature_spec"][name]
        for mapping, chunks in spec["source_spec"].items():
            spec["source_spec"][mapping] = [c for c in chunks if not set(c["features"]) & set(names)]
    return change


def rename_channel(old, new):
    def change(spec):
        spec["channel_spec"][new] = spec["channel_spec"].pop(old)
    return change


def to_multi_hot(names, max_hotness=1):
    """Move one-hot features whose files hold one id per row to `multihot_categorical` (same bytes when
    max_hotness is 1: a bag of exactly one id)."""
    def change(spec):
        channels = spec["channel_spec"]
        channels["categorical"] = [n for n in channels["categorical"] if n not in names]
        if not channels["categorical"]:
            del channels["categorical"]
        channels["multihot_categorical"] = list(names)
        for name in names:
            spec["feature_spec"][name]["max_hotness"] = max_hotness
    return change


def test_nvidia_style_spec_variants_train_or_are_refused_by_rule(tmp_path, capfd):
    base = make_dataset(tmp_path / "base", 2, 3)
    variants = {
        "no_categorical": (drop_channel("categorical"), "the model needs at least one categorical feature"),
        "no_numerical": (drop_channel("numerical"), None),
        "combiner_in_spec": (lambda spec: spec["feature_spec"]["cat_0"].update(combiner="mean"), None),
        "onehot_channel": (rename_channel("categorical", "onehot_categorical"), None),
        "multi_hot_channel": (to_multi_hot(["cat_2"]), None),
        "only_multi_hot": (to_multi_hot(["cat_0", "cat_1", "cat_2"]), None),
        "hotness_beyond_the_file": (to_multi_hot(["cat_1"], max_hotness=2), "cat_1"),
        "no_max_hotness": (lambda spec: (to_multi_hot(["cat_1"])(spec),
                                         spec["feature_spec"]["cat_1"].pop("max_hotness")), "max_hotness"),
    }
    for name, (change, _) in variants.items():
        dataset = str(tmp_path / name)
        subprocess.run(["cp", "-r", base, dataset], check=True)
        edit_spec(dataset, change)
    # The refusals' processes run beside the trainings, which run here one after the other.
    with ThreadPoolExecutor(max_workers=1) as pool:
        refusals = {name: pool.submit(main_py, str(tmp_path / name), tmp_path / name / "run")
                    for name, (_, rule) in variants.items() if rule is not None}
        outcomes = {name: main_here(capfd, str(tmp_path / name), tmp_path / name / "run")
                    for name, (_, rule) in variants.items() if rule is None}
        outcomes.update((name, refused.result()) for name, refused in refusals.items())
    for name, (change, rule) in variants.items():
        dataset = str(tmp_path / name)
        status, stdout, stderr = outcomes[name]
        if rule is None:
            spec = yaml.safe_load(open(os.path.join(dataset, "feature_spec.yaml")))
            numerical = spec["channel_spec"].get("numerical") or []
            one_hot = [n for n in ["cat_0", "cat_1", "cat_2"] if n not in spec["channel_spec"].get(
                "multihot_categorical", [])]
            assert_trained(status, stdout, stderr, str(tmp_path / name / "run"), len(numerical),
                           one_hot + spec["channel_spec"].get("multihot_categorical", []))
        else:
            assert_refused(status, stdout, stderr, rule)
    print(json.dumps({name: outcome[0] for name, outcome in outcomes.items()}))


@pytest.mark.multirank
def test_two_ranks_train_a_five_numerical_dataset_like_one_process(tmp_path):
    """The contract reaches the hybrid-parallel layer too: 2 ranks (tables sharded over them) train the same
    model as one process, on a dataset of 5 numerical and 3 categorical features."""
    from tests.support.multirank import run_ranks, run_single

    dataset = make_dataset(tmp_path / "data", 5, 3)
    finals = {}
    for world, launch in ((1, run_single), (2, lambda argv, **kw: run_ranks(2, argv, **kw))):
        run_dir, ckpt = tmp_path / f"run{world}", tmp_path / f"ckpt{world}"
        launch(["main.py", "--dataset_path", dataset, "--run_dir", str(run_dir), "--save_checkpoint_path", str(ckpt),
                *FLAGS], timeout=180).check()
        records = read_metrics(str(run_dir / "metrics.jsonl"))
        finals[world] = ([r["loss"] for r in records if r["kind"] == "train"], checkpoint.read_arrays(str(ckpt)))
    (losses_1, arrays_1), (losses_2, arrays_2) = finals[1], finals[2]
    np.testing.assert_allclose(losses_2, losses_1, rtol=1e-5)
    assert sorted(arrays_1) == sorted(arrays_2) and "embedding/cat_2/value" in arrays_1
    for key in arrays_1:
        np.testing.assert_allclose(arrays_2[key], arrays_1[key], rtol=1e-4, atol=1e-6, err_msg=key)
    assert checkpoint.read_meta(checkpoint.find_checkpoint(str(tmp_path / "ckpt2")))["plan"]["world_size"] == 2
