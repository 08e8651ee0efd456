"""A real `python main.py` killed with SIGKILL mid-run and restarted with the same command ends with
bit-identical weights (and optimizer state) to a run that was never interrupted: one process, and a
3-rank `horovodrun` job whose every process is SIGKILLed (summation order over 3 ranks is fixed only
because reductions are, see docs/hybrid_parallel.md "Reproducible reductions").

Its run (tests/support/runs.py) is also the one tests/integration/test_signals.py stops with SIGTERM / SIGINT."""
import os
import signal
import subprocess
import time

import pytest

from tests.support import ROOT
from tests.support.hybrid import (
    REPRO_CHECKPOINT_EVERY,
    REPRO_STEPS,
    assert_same_bits,
    repro_command,
    repro_run,
)
from tests.support.multirank import finish, run_ranks, scratch_dir, start_ranks
from tests.support.processes import descendants
from tests.support.runs import MAX_STEPS, TIMEOUT, assert_same_final_weights, latest_step, main_command, run_main


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
    for pid in [launcher.pid, *descendants(launcher.pid)]:
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
