"""A real `python main.py` killed with SIGKILL mid-run and restarted with the same command ends with
bit-identical weights (and optimizer state) to a run that was never interrupted: one process, and a
3-rank `horovodrun` job whose every process is SIGKILLed (summation order over 3 ranks is fixed only
because reductions are, see docs/hybrid_parallel.md "Reproducible reductions").

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
from tests.integration.test_hybrid_parallel import (
    REPRO_CHECKPOINT_EVERY,
    REPRO_STEPS,
    assert_same_bits,
    repro_command,
    repro_run,
)
from tests.integration.test_rank_failure import _descendants
from tests.support import ROOT
from tests.support.multirank import finish, run_ranks, scratch_dir, start_ranks

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


def _kill_after_checkpoint(process, ckpt_root: str, step: int, kill, pause: float = 0.0) -> int:
    """Once `latest` reaches `step` (and `pause` s later), `kill()` the running job; returns `latest` then."""
    try:
        deadline = time.time() + TIMEOUT
        while latest_step(ckpt_root) < step and process.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(pause)
        assert process.poll() is None, "the run finished before it could be killed; make it longer"
        kill()
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    return latest_step(ckpt_root)


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
    killed_at = _kill_after_checkpoint(process, ckpt_root, 40, lambda: process.send_signal(signal.SIGKILL),
                                       pause=0.05)  # somewhere between two checkpoints (or inside one)
    assert 40 <= killed_at < MAX_STEPS

    output = run_main(command)  # the very same command
    assert f"restored {ckpt_root}/step_{killed_at:08d}" in output
    assert_same_final_weights(str(tmp_path / "uninterrupted" / "ckpt"), ckpt_root)


def _sigkill_job(launcher) -> None:
    """SIGKILL the launcher and every rank at once, as a lost node would (no rank gets to react)."""
    for pid in [launcher.pid, *_descendants(launcher.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.multirank
@pytest.mark.slow
def test_three_rank_job_sigkilled_then_restarted_gives_bit_identical_weights():
    uninterrupted = repro_run(3, "first")
    base = scratch_dir("repro3_killed_")
    command = repro_command(base)
    started = time.monotonic()
    launcher = start_ranks(3, command, result_dir=base)
    killed_at = _kill_after_checkpoint(launcher, base + "/ckpt", REPRO_CHECKPOINT_EVERY, lambda: _sigkill_job(launcher))
    finish(launcher, TIMEOUT, started, base)  # reaps the launcher and drains its pipes
    assert REPRO_CHECKPOINT_EVERY <= killed_at < REPRO_STEPS

    resumed = run_ranks(3, command, timeout=TIMEOUT).check()  # the very same command
    assert f"restored {base}/ckpt/step_{killed_at:08d}" in resumed.stdout
    assert_same_bits(base, uninterrupted)
