"""A real `python main.py` killed with SIGKILL mid-run and restarted with the same command ends with
bit-identical weights (and optimizer state) to a run that was never interrupted.

The helpers here (`main_command`, `run_main`, `latest_step`, `assert_same_final_weights`) also serve
tests/test_signals.py, which stops the same run with SIGTERM / SIGINT instead."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dlrm.train import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    assert any(key.startswith("t") and not key.endswith("/value") for key in reference)  # optimizer slots too


@pytest.mark.slow
def test_sigkill_then_restart_gives_bit_identical_weights(tmp_path):
    run_main(main_command(tmp_path, "uninterrupted"))  # also generates the dataset the second run reuses

    command = main_command(tmp_path, "killed")
    ckpt_root = str(tmp_path / "killed" / "ckpt")
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + TIMEOUT
        while latest_step(ckpt_root) < 40 and process.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)  # somewhere between two checkpoints (or inside one)
        assert process.poll() is None, "the run finished before it could be killed; make it longer"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    killed_at = latest_step(ckpt_root)
    assert 40 <= killed_at < MAX_STEPS

    output = run_main(command)  # the very same command
    assert f"restored {ckpt_root}/step_{killed_at:08d}" in output
    assert_same_final_weights(str(tmp_path / "uninterrupted" / "ckpt"), ckpt_root)
