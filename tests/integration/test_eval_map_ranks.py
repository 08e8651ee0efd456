"""MAP@12, AUC and the predictions file of `--mode eval` are the same with 2 ranks as with 1 process (real
processes through main.py), and an independent brute force over the file gives the metrics the run reports.

A small DLRM trains a few steps in one process on a dataset of displays (2-12 ads, one click each;
tests/support/displays.py), its final evaluation writing the predictions; its checkpoint is then evaluated by
2 ranks (horovodrun --gloo, `--mode eval`). The eval batch is 50 rows, so displays are split between batches
and between ranks.
"""
import os
import re

import numpy as np
import pytest

from dlrm.train.metrics_log import read_metrics
from tests.support.displays import brute_force_auc, brute_force_map, read_predictions, write_display_dataset
from tests.support.multirank import run_ranks, run_single, scratch_dir
from tests.support.processes import rank_lines

MODEL = ["--embedding_dim", "4", "--bottom_mlp_dims", "8-4", "--top_mlp_dims", "8-1", "--valid_batch_size", "50",
         "--intra_op_threads", "1"]
TRAIN = ["--global_batch_size", "128", "--max_steps", "8", "--optimizer", "adam", "--learning_rate", "0.02",
         "--warmup_steps", "0", "--decay_steps", "0", "--log_every", "4"]


def last_eval(run_dir: str) -> dict:
    return [r for r in read_metrics(os.path.join(run_dir, "metrics.jsonl")) if r["kind"] == "eval"][-1]


@pytest.mark.multirank
def test_two_rank_eval_equals_one_process_and_the_brute_force_over_its_file():
    work = scratch_dir("eval_map_")
    dataset = write_display_dataset(os.path.join(work, "data"))
    ckpt = os.path.join(work, "ckpt")
    trained = run_single(["main.py", "--dataset_path", dataset, "--run_dir", os.path.join(work, "eval1"),
                          "--save_checkpoint_path", ckpt, "--predictions_path", os.path.join(work, "eval1.csv"),
                          *MODEL, *TRAIN], timeout=180).check()
    outputs = {1: trained.stdout}  # the final evaluation of training: one process, the checkpoint's weights
    outputs[2] = run_ranks(2, ["main.py", "--dataset_path", dataset, "--mode", "eval", "--restore_checkpoint_path",
                               ckpt, "--run_dir", os.path.join(work, "eval2"), "--predictions_path",
                               os.path.join(work, "eval2.csv"), *MODEL], timeout=180).check().stdout

    one, two = (read_predictions(os.path.join(work, f"eval{world}.csv")) for world in (1, 2))
    header, groups, labels, logits, probabilities = one
    assert header == ["group_id", "label", "logit", "probability"] and groups is not None
    np.testing.assert_array_equal(two[1], groups)  # same rows in the same (dataset) order
    np.testing.assert_array_equal(two[2], labels)
    np.testing.assert_allclose(two[3], logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probabilities, 1 / (1 + np.exp(-logits.astype(np.float64))), rtol=1e-12)

    record = last_eval(os.path.join(work, "eval1"))
    assert record["rows"] == labels.size and record["groups"] == np.unique(groups).size  # one click per display
    assert record["map_at_12"] == pytest.approx(brute_force_map(groups, labels, logits), abs=1e-12)
    assert record["auc"] == pytest.approx(brute_force_auc(labels, logits), abs=1e-12)
    two_record = last_eval(os.path.join(work, "eval2"))
    for key in ("map_at_12", "auc", "logloss"):
        assert two_record[key] == pytest.approx(record[key], rel=1e-6, abs=1e-7), key
    assert 0.0 < record["map_at_12"] < 1.0 and two_record["rows"] == record["rows"]
    for world in (1, 2):
        final = re.search(r"final AUC (\S+), log loss (\S+), MAP@12 (\S+) at step 8", outputs[world])
        assert final, outputs[world][-2000:]
        assert float(final.group(3)) == pytest.approx(record["map_at_12"], abs=6e-6)
        assert float(final.group(1)) == pytest.approx(record["auc"], abs=6e-6)


@pytest.mark.multirank
def test_an_unwritable_predictions_path_is_one_message_from_two_ranks_before_evaluating():
    work = scratch_dir("eval_map_bad_")
    dataset = write_display_dataset(os.path.join(work, "data"), train_displays=20, test_displays=20)
    path = os.path.join(work, "missing", "p.csv")
    run = run_ranks(2, ["main.py", "--dataset_path", dataset, "--mode", "eval", "--restore_checkpoint_path",
                        os.path.join(work, "ckpt"), "--run_dir", os.path.join(work, "run"), "--predictions_path",
                        path, *MODEL], timeout=120)
    assert not run.timed_out and run.returncode == 1, run.stderr[-3000:]
    output = run.stdout + run.stderr
    errors = [line for line in output.splitlines() if "error:" in line]
    assert len(errors) == 1, output[-3000:]
    assert errors[0].endswith(f"error: cannot write the predictions file {path} (--predictions_path): "
                              f"No such file or directory (ENOENT)"), errors
    ranks_output = rank_lines(output)
    assert ranks_output and not any("Traceback" in text for _, text in ranks_output)  # horovodrun's own is not ours
    assert "checked every value" not in output  # refused before the data check and the checkpoint
