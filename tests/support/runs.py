"""Small real `main.py` runs: the flags of a few-second training run, and one run stopped and resumed
(killed by tests/integration/test_resume_sigkill.py, signalled by tests/integration/test_signals.py)."""
import os
import subprocess
import sys

import numpy as np

from dlrm.train import checkpoint
from tests.support import ROOT

# A small synthetic dataset and its evaluation: the flags of every mode (eval and the inference benchmark
# take the model from their checkpoint).
_SMALL_ROWS = ["--synthetic_train_rows", "6000", "--synthetic_test_rows", "2000", "--intra_op_threads", "2"]
SMALL_DATA = [*_SMALL_ROWS, "--valid_batch_size", "1024"]
# A small DLRM or DCNv2 (with SMALL_DCN) trained on it: a few seconds per run on 2 cores. SMALL_STEP: the
# flags of its training step only, all that the training benchmark (--benchmark) takes.
SMALL_STEP = [*_SMALL_ROWS, "--global_batch_size", "512", "--embedding_dim", "8", "--bottom_mlp_dims", "16-8",
              "--top_mlp_dims", "16-1", "--warmup_steps", "2", "--decay_start_step", "4", "--decay_steps", "4"]
SMALL = [*SMALL_STEP, "--valid_batch_size", "1024", "--log_every", "2"]
SMALL_DCN = ["--arch", "dcnv2", "--dcn_low_rank_dim", "8", "--dcn_num_layers", "2"]

MAX_STEPS = 100
# 15,900 rows / 256 = 62 full batches + one of 28 rows: the run crosses two epoch ends and a short batch.
FLAGS = ["--synthetic_train_rows", "15900", "--synthetic_test_rows", "2048", "--global_batch_size", "256",
         "--valid_batch_size", "2048", "--embedding_dim", "8", "--bottom_mlp_dims", "32-8", "--top_mlp_dims",
         "32-16-1", "--optimizer", "adam", "--learning_rate", "0.01", "--warmup_steps", "20",
         "--decay_start_step", "60", "--decay_steps", "60", "--max_steps", str(MAX_STEPS), "--checkpoint_every", "20",
         "--keep_checkpoints", "2", "--eval_every", "50", "--log_every", "10", "--intra_op_threads", "2"]
TIMEOUT = 240


def main_command(tmp_path, name, *extra):
    """The main.py command of run `name` (its own run and checkpoint directories; the dataset is shared)."""
    return [sys.executable, os.path.join(ROOT, "main.py"), "--synthetic_dir", str(tmp_path / "data"),
            "--run_dir", str(tmp_path / name / "run"),
            "--save_checkpoint_path", str(tmp_path / name / "ckpt")] + FLAGS + list(extra)


def run_main(command):
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def latest_step(ckpt_root):
    try:
        with open(os.path.join(ckpt_root, "latest")) as f:
            return int(f.read().strip().split("_")[1])
    except (OSError, ValueError, IndexError):
        return -1


def assert_same_final_weights(reference_root, resumed_root, step=MAX_STEPS):
    """Every array of both final checkpoints (weights and optimizer slots) is bit-identical."""
    reference = checkpoint.read_arrays(os.path.join(reference_root, f"step_{step:08d}"))
    resumed = checkpoint.read_arrays(os.path.join(resumed_root, f"step_{step:08d}"))
    assert len(reference) > 20 and reference.keys() == resumed.keys()
    different = [key for key in reference if not np.array_equal(reference[key], resumed[key])]
    assert different == []
    assert any(key.startswith("embedding/") and not key.endswith("/value") for key in reference)  # slots too


def main_in_process(capfd, argv: list) -> subprocess.CompletedProcess:
    """main.py's entry point (`dlrm.cli.main`) on `argv` in the test process, for runs that train (TensorFlow
    is not started again): its exit status and output, captured at the file descriptors as a process of its
    own would give them. Runs whose exit status and stderr are the point stay processes of their own."""
    from dlrm.cli import main

    capfd.readouterr()
    status = main([str(arg) for arg in argv])
    stdout, stderr = capfd.readouterr()
    return subprocess.CompletedProcess(["main.py", *argv], status, stdout, stderr)
