"""A rank killed mid-training: the job ends non-zero within a bound and the last checkpoint loads.

`horovodrun -np 2 python main.py` trains the tiny hybrid-parallel model (sharded tables) with a
checkpoint every 2 steps. Once a checkpoint is complete, rank 0 — the coordinator, and the rank that
renames finished checkpoints — is SIGKILLed. The surviving rank must not hang: its next collective
fails (Gloo sees the closed connection), it exits non-zero and the launcher ends the job, all within
`FAILURE_BOUND_SECONDS` (Horovod's stall shutdown, 30 s in tests, is the backstop for a rank stuck
waiting on a peer that is alive but silent). The newest complete checkpoint must then restore into a
one-process model (`main.py --mode eval`), and no half-written `step_*` directory may be visible.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from dlrm.checkpoint_layout import STEP_DIR, UNFINISHED
from tests.support.hybrid import CARDINALITIES, eval_flags, train_flags
from tests.support.multirank import finish, run_single, scratch_dir, start_ranks
from tests.support.processes import alive as _alive
from tests.support.processes import first_exit, rank_lines, rank_pids, wait_until

FAILURE_BOUND_SECONDS = 45.0


@pytest.mark.multirank
@pytest.mark.slow
@pytest.mark.both_stacks
def test_killed_rank_ends_the_job_quickly_and_keeps_the_last_checkpoint_loadable():
    from dlrm.data.synthetic.generator import generate_dataset
    from dlrm.train import checkpoint

    work = scratch_dir("rank_failure_")
    dataset = os.path.join(work, "data")
    generate_dataset(dataset, CARDINALITIES, 16_000, 64, seed=4)  # 1000 steps: far more than we wait
    root = os.path.join(work, "ckpt")
    flags = train_flags(dataset, "adagrad", os.path.join(work, "run"), root, global_batch=16)
    flags += ["--checkpoint_every", "2", "--log_every", "10"]

    started = time.monotonic()
    proc = start_ranks(2, ["main.py", *flags], result_dir=work)
    try:
        assert wait_until(lambda: checkpoint.find_checkpoint(root) is not None or proc.poll() is not None,
                         timeout=200), "no checkpoint within 200 s"
        assert proc.poll() is None, "training ended before the kill"
        pids = rank_pids(proc.pid)
        assert sorted(pids) == [0, 1], pids
        time.sleep(0.5)  # mid-training, possibly mid-checkpoint
        os.kill(pids[0], signal.SIGKILL)
        killed_at = time.monotonic()
        survivor_gone = wait_until(lambda: not _alive(pids[1]), timeout=FAILURE_BOUND_SECONDS + 30)
        survivor_seconds = time.monotonic() - killed_at
    finally:
        run = finish(proc, timeout=FAILURE_BOUND_SECONDS + 60 + (time.monotonic() - started), started=started,
                     result_dir=work)
    job_seconds = run.elapsed - (killed_at - started)
    print(f"survivor exited {survivor_seconds:.1f} s, launcher {job_seconds:.1f} s after the kill")
    assert survivor_gone and survivor_seconds < FAILURE_BOUND_SECONDS, run.stdout[-3000:]
    assert not run.timed_out and run.returncode != 0
    assert job_seconds < FAILURE_BOUND_SECONDS
    assert first_exit(run.stdout + run.stderr) == (0, 128 + signal.SIGKILL)
    print(run.stdout[-2000:], run.stderr[-3000:])

    # Under a checkpoint's name (step_X) only complete checkpoints; the kill may leave one being written
    # (step_X.tmp) or being pruned (step_X.deleting), never loaded. The newest one restores at world 1.
    last = checkpoint.find_checkpoint(root)
    assert last and os.path.exists(os.path.join(last, "meta.json"))
    step = checkpoint.read_meta(last)["step"]
    assert step >= 2 and step % 2 == 0
    for name in os.listdir(root):
        if STEP_DIR.match(name):
            assert os.path.exists(os.path.join(root, name, "meta.json")), name
        elif name.startswith("step_"):
            assert UNFINISHED.match(name), name
    restore = run_single(["main.py", *eval_flags(dataset, os.path.join(work, "eval")), "--mode", "eval",
                          "--restore_checkpoint_path", last], timeout=240)
    restore.check()
    assert f"at step {step}" in restore.stdout + restore.stderr


@pytest.mark.multirank
@pytest.mark.slow
@pytest.mark.parametrize("mapping, bad_row", [("train", 5 * 16 + 12), ("test", 40)])
def test_a_bad_row_on_one_rank_stops_both_ranks_at_one_step_with_a_checkpoint(mapping, bad_row):
    """Rank 1 cannot read its slice of the training batch of step 6 (rows 8..15 of each batch of 16), or of
    the evaluation after step 5 (rows 32..63 of the batch of 64): at that step boundary both ranks write
    the checkpoint of step 5; rank 1 reports the row, rank 0 stops as PeerRankFailed (no second message)."""
    from dlrm.data.synthetic.generator import generate_dataset
    from dlrm.train import checkpoint
    from tests.support.datasets import poke
    from tests.support.multirank import run_ranks

    work = scratch_dir("bad_row_")
    dataset = os.path.join(work, "data")
    generate_dataset(dataset, CARDINALITIES, 2_000, 64, seed=4)
    poke(os.path.join(dataset, mapping, "label.bin"), "uint8", bad_row, 7)
    root = os.path.join(work, "ckpt")
    flags = train_flags(dataset, "adagrad", os.path.join(work, "run"), root, global_batch=16)
    run = run_ranks(2, ["main.py", *flags, "--max_steps", "20", "--eval_every", "5", "--skip_data_validation"],
                    timeout=120)  # without the skip, the start-up check refuses the row before step 1
    assert not run.timed_out and run.returncode != 0
    output = run.stdout + run.stderr
    # rank 1 prints its error and exits first; rank 0, which prints nothing, waits for it (dlrm.cli_errors)
    assert first_exit(output) == (1, 1)
    errors = [(rank, text) for rank, text in rank_lines(output) if "error:" in text]
    assert len(errors) == 1 and errors[0][0] == 1 and errors[0][1].startswith("error:"), errors
    assert f"row {bad_row}" in errors[0][1] and os.path.join(mapping, "label.bin") in errors[0][1]
    assert checkpoint.find_checkpoint(root) == os.path.join(root, "step_00000005")
    assert f"rank 1 could not read its data after step 5: stopping; checkpoint {root}/step_00000005 written" \
        in run.stdout
