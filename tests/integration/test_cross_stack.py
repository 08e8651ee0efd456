"""Checkpoints do not care which stack wrote them: a checkpoint trained by 2 Horovod ranks on the Horovod
stack (TensorFlow 2.15) is evaluated by 3 MPI-backend ranks on the current stack (TensorFlow 2.21, another
interpreter), and the other way round, and both score the test rows as the training run's own final
evaluation did (the predictions file, row by row).

The model is the hybrid-parallel tests' (tests/support/hybrid.py): one-hot and multi-hot tables in every
sharded layout, so the other world size's plan reshards every table. DLRM and Wide & Deep (with crosses)
from 2.15 to 2.21, DCNv2 from 2.21 to 2.15: each model once, both directions, multi-hot tables in each.

Runs in CI's Horovod lane (`make STACK=horovod test-horovod-lane`), which sets DLRM_OTHER_STACK_PYTHON to
the current stack's interpreter; elsewhere it is skipped with that reason.
"""
import os
import sys

import numpy as np
import pytest

from dlrm.dist.launcher import installed
from tests.support import hybrid
from tests.support.displays import read_predictions
from tests.support.multirank import run_ranks, scratch_dir

OTHER_PYTHON = os.environ.get("DLRM_OTHER_STACK_PYTHON", "")
pytestmark = [
    pytest.mark.both_stacks,
    pytest.mark.slow,
    pytest.mark.skipif(not (installed("horovod") and os.path.exists(OTHER_PYTHON)),
                       reason="runs on the Horovod stack with DLRM_OTHER_STACK_PYTHON set to the current stack's "
                              "interpreter (CI's Horovod lane: make STACK=horovod test-horovod-lane)"),
]
DCNV2 = "dcnv2"
ARCH_FLAGS = {"dlrm": [], DCNV2: ["--arch", "dcnv2", "--dcn_num_layers", "2", "--dcn_low_rank_dim", "4"],
              hybrid.WIDEDEEP: []}
# The one place a run's stack is chosen: (ranks, backend, interpreter).
HOROVOD_STACK = (2, "horovod", sys.executable)
CURRENT_STACK = (3, "mpi", OTHER_PYTHON)


def train_flags(model: str, dataset: str, work: str) -> list:
    """Train `model` into `work`/train_ckpt; its final evaluation's predictions go to `work`/train.csv."""
    optimizer = hybrid.WIDEDEEP if model == hybrid.WIDEDEEP else "adagrad"
    run_dir, checkpoint = os.path.join(work, "train_run"), os.path.join(work, "train_ckpt")
    return [*hybrid.train_flags(dataset, optimizer, run_dir, checkpoint), *ARCH_FLAGS[model],
            "--predictions_path", os.path.join(work, "train.csv")]


def launch(stack: tuple, argv: list) -> None:
    world, backend, python = stack
    run_ranks(world, ["main.py", *argv, "--backend", backend], timeout=600, backend=backend, python=python).check()


@pytest.mark.multirank
@pytest.mark.parametrize("model,writer,reader", [
    ("dlrm", HOROVOD_STACK, CURRENT_STACK),
    (hybrid.WIDEDEEP, HOROVOD_STACK, CURRENT_STACK),
    (DCNV2, CURRENT_STACK, HOROVOD_STACK),
], ids=["dlrm-2.15to2.21", "widedeep-2.15to2.21", "dcnv2-2.21to2.15"])
def test_a_checkpoint_from_one_stack_scores_the_same_on_the_other(model, writer, reader):
    work = scratch_dir(f"cross_stack_{model}_")
    dataset = hybrid.shared_dataset()
    launch(writer, train_flags(model, dataset, work))
    checkpoint = os.path.join(work, "train_ckpt")
    launch(reader, [*hybrid.eval_flags(dataset, os.path.join(work, "eval_run")), "--mode", "eval",
                    "--restore_checkpoint_path", checkpoint, "--predictions_path", os.path.join(work, "eval.csv")])

    trained, evaluated = (read_predictions(os.path.join(work, f"{name}.csv")) for name in ("train", "eval"))
    labels, logits = trained[2], trained[3]
    assert labels.size > 0 and np.isfinite(logits).all()
    np.testing.assert_array_equal(evaluated[2], labels)  # the same rows, in the same (dataset) order
    np.testing.assert_allclose(evaluated[3], logits, rtol=1e-5, atol=1e-6)
