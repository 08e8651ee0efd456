"""Export for serving: the SavedModel (and ONNX) of a 1-rank, a 2-rank, a multi-hot and a Wide & Deep
checkpoint, scored in a fresh process that imports TensorFlow only, equals the trainer's own scores of the
same test rows; and the export's refusals (one message each, no traceback)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from dlrm.cli import parse_config
from dlrm.cli_errors import run_main
from dlrm.errors import UsageError
from dlrm.export.cli import export_checkpoint
from tests.data.mixed_dataset import write_mixed
from tests.support import hybrid
from tests.support.multirank import memoised, run_ranks, run_single, scratch_dir
from tests.support.runs import SMALL
from tests.support.serving import FreshScorer, compare

TOLERANCE = 1e-6  # float32: the SavedModel runs the trainer's graph of ops on the same weights
ONNX_TOLERANCE = 1e-5  # onnxruntime's own kernels round float32 sums in another order


def _train(name: str, flags: list, export_to: str | None = None, ranks: int = 1) -> None:
    command = ["main.py", *flags] + (["--saved_model_output_path", export_to] if export_to else [])
    (run_ranks(ranks, command, timeout=600) if ranks > 1 else run_single(command, timeout=480)).check()


def one_rank() -> tuple:
    """DLRM on the small synthetic dataset, exported by the trainer's --saved_model_output_path."""
    def go():
        base = scratch_dir("export_one_rank_")
        flags = ["--synthetic_dir", f"{base}/data", "--run_dir", f"{base}/run", "--save_checkpoint_path",
                 f"{base}/ckpt", *SMALL, "--max_steps", "6"]
        _train("one_rank", flags, export_to=f"{base}/served")
        return base, flags
    return memoised("export_one_rank", go)


@pytest.fixture(scope="module")
def scorer():
    """One fresh scoring process for the module's exports (TensorFlow is imported once)."""
    fresh = FreshScorer()
    yield fresh
    fresh.close()


def _export(*argv: str) -> None:
    """`python -m dlrm.export` in this process: tests/train/test_verified_checkpoints.py launches the module."""
    assert export_checkpoint(list(argv)) == 0


def _assert_close(differences: dict) -> None:
    print("max abs differences:", json.dumps(differences))
    assert differences["rows"] > 0
    assert all(value <= (ONNX_TOLERANCE if key.startswith("onnx") else TOLERANCE)
               for key, value in differences.items() if key != "rows"), differences


@pytest.mark.slow
def test_one_rank_checkpoint_saved_model_and_onnx_score_like_the_trainer(scorer):
    base, _ = one_rank()
    _assert_close(compare(scorer, f"{base}/served", f"{base}/data", f"{base}/ckpt"))
    _export("--checkpoint", f"{base}/ckpt", "--out", f"{base}/with_onnx", "--onnx")
    _assert_close(compare(scorer, f"{base}/with_onnx", f"{base}/data", f"{base}/ckpt", with_onnx=True))


@pytest.mark.slow
def test_multi_hot_dcnv2_checkpoint_scores_like_the_trainer(scorer, tmp_path):
    """One-hot, multi-hot (a 1-hot bag, empty bags, a full bag of the largest id), a group id; DCNv2."""
    write_mixed(tmp_path / "data", 400, seed=3, mappings=("train", "test"))
    flags = ["--dataset_path", str(tmp_path / "data"), "--arch", "dcnv2", "--embedding_dim", "4",
             "--bottom_mlp_dims", "8-4", "--top_mlp_dims", "8-1", "--dcn_num_layers", "2", "--dcn_low_rank_dim", "4",
             "--global_batch_size", "64", "--valid_batch_size", "96", "--max_steps", "5", "--optimizer", "adagrad",
             "--learning_rate", "0.1", "--warmup_steps", "0", "--decay_steps", "0", "--intra_op_threads", "2",
             "--run_dir", str(tmp_path / "run"), "--save_checkpoint_path", str(tmp_path / "ckpt")]
    _train("multi_hot", flags)
    _export("--checkpoint", str(tmp_path / "ckpt"), "--out", str(tmp_path / "served"), "--onnx")
    with open(tmp_path / "served" / "assets" / "serving_inputs.json") as f:
        names = [item["name"] for item in json.load(f)["inputs"]]
    assert names == ["numerical", "onehot", "topics", "history", "single"]
    _assert_close(compare(scorer, str(tmp_path / "served"), str(tmp_path / "data"), str(tmp_path / "ckpt"),
                          with_onnx=True))


@pytest.mark.slow
def test_wide_and_deep_checkpoint_scores_like_the_trainer(scorer, tmp_path):
    """Wide & Deep on the mixed dataset: the deep and the `_wide` tables, two crosses (one exact, one hashed:
    serving computes the same cross ids), FTRL and RMSProp state left out, dropout off when serving."""
    write_mixed(tmp_path / "data", 400, seed=4, mappings=("train", "test"))
    flags = ["--dataset_path", str(tmp_path / "data"), "--arch", "widedeep", "--embedding_dim", "4",
             "--deep_hidden_units", "8", "8", "--global_batch_size", "64", "--eval_batch_size", "96",
             "--max_steps", "5", "--linear_learning_rate", "0.1", "--deep_learning_rate", "0.01",
             "--deep_warmup_epochs", "0", "--intra_op_threads", "2", "--wide_crosses", "cat_0:cat_1,cat_2:cat_1",
             "--wide_cross_buckets", "2048", "--run_dir", str(tmp_path / "run"),
             "--save_checkpoint_path", str(tmp_path / "ckpt")]
    _train("widedeep", flags)
    _export("--checkpoint", str(tmp_path / "ckpt"), "--out", str(tmp_path / "served"), "--onnx")
    _assert_close(compare(scorer, str(tmp_path / "served"), str(tmp_path / "data"), str(tmp_path / "ckpt"),
                          with_onnx=True))


@pytest.mark.multirank
@pytest.mark.slow
def test_two_rank_checkpoint_scores_like_the_trainer(scorer):
    """2 ranks (horovodrun --gloo) with row-, column-sliced, replicated and table-wise tables, multi-hot bags
    in each; rank 0 exports the final checkpoint at the end of training."""
    dataset = memoised("hybrid_dataset", hybrid.make_dataset)
    base = scratch_dir("export_two_ranks_")
    flags = hybrid.train_flags(dataset, "adagrad", f"{base}/run", f"{base}/ckpt")
    _train("two_ranks", flags, export_to=f"{base}/served", ranks=2)
    with open(f"{base}/served/assets/serving_inputs.json") as f:
        assert json.load(f)["source"]["written_by_world_size"] == 2
    _assert_close(compare(scorer, f"{base}/served", dataset, f"{base}/ckpt"))


def _refused(capsys, *argv: str) -> str:
    assert run_main(export_checkpoint, list(argv)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_refusals_one_message_each(capsys, tmp_path):
    base, _ = one_rank()
    step = os.path.join(base, "ckpt", "step_00000006")
    out = str(tmp_path / "out")
    assert "does not exist" in _refused(capsys, "--checkpoint", str(tmp_path / "none"), "--out", out)
    unfinished = tmp_path / "unfinished"
    shutil.copytree(step, unfinished / "step_00000006.tmp")
    assert "no complete checkpoint" in _refused(capsys, "--checkpoint", str(unfinished), "--out", out)
    missing_piece = tmp_path / "missing_piece" / "step_00000006"
    shutil.copytree(step, missing_piece)
    shutil.rmtree(missing_piece / "embedding" / "cat_3" / "value")
    assert "'cat_3'" in _refused(capsys, "--checkpoint", str(missing_piece), "--out", out)
    assert "pass --dataset_path" in _refused(capsys, "--checkpoint", step, "--out", out, "--dataset_path",
                                             str(tmp_path / "moved"))
    assert "too large to export on one host" in _refused(capsys, "--checkpoint", step, "--out", out,
                                                         "--max_memory", "1KiB")
    assert sorted(os.listdir(tmp_path)) == ["missing_piece", "unfinished"]  # no output, no temporary directory


def test_output_directory_refused_unless_overwrite_which_replaces_only_a_saved_model(capsys, tmp_path):
    base, _ = one_rank()
    out = tmp_path / "out"
    assert run_main(export_checkpoint, ["--checkpoint", f"{base}/ckpt", "--out", str(out)]) == 0
    (out / "stale").write_text("x")  # a file of the earlier output that the new one does not have
    assert _refused(capsys, "--checkpoint", f"{base}/ckpt", "--out", str(out)) == (
        f"error: --out {out} already holds a SavedModel: pass --overwrite to replace it, or choose another directory\n")
    assert run_main(export_checkpoint, ["--checkpoint", f"{base}/ckpt", "--out", str(out), "--overwrite"]) == 0
    assert sorted(os.listdir(out)) == ["assets", "fingerprint.pb", "saved_model.pb", "variables"]  # nothing mixed
    assert [p for p in os.listdir(tmp_path) if p != "out"] == []  # no temporary directory left
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert _refused(capsys, "--checkpoint", f"{base}/ckpt", "--out", str(mine), "--overwrite") == (
        f"error: --out {mine} is a non-empty directory that holds no SavedModel (no saved_model.pb): choose a new "
        f"or empty directory\n")
    assert (mine / "notes.txt").read_text() == "mine"
    assert _refused(capsys, "--checkpoint", f"{base}/ckpt", "--out", str(mine / "notes.txt")) == (
        f"error: --out {mine / 'notes.txt'} exists and is not a directory\n")


def test_the_trainer_refuses_an_existing_saved_model_output_path_before_training(tmp_path):
    from dlrm.export.after_training import ExportAfterTraining
    from dlrm.output_dir import OutputDirError

    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "saved_model.pb").write_text("")
    with pytest.raises(OutputDirError, match=r"^--saved_model_output_path \S+ already holds a SavedModel: choose "
                                             r"another directory, or remove it first$"):
        ExportAfterTraining(str(tmp_path / "served")).check()


def test_trainer_export_flag_needs_a_checkpoint_path():
    with pytest.raises(UsageError, match="argument --saved_model_output_path: not used without --save_checkpoint_path"):
        parse_config(["--saved_model_output_path", "served"])
    with pytest.raises(UsageError, match="argument --saved_model_output_path: not used by --mode train --benchmark"):
        parse_config(["--benchmark", "--saved_model_output_path", "served"])
