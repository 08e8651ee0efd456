"""The MPI backend (mpi4py under plain `mpirun`) on real ranks: its collectives, and a job that never hangs.

- Every collective at 2 and 3 ranks, eager and inside one `tf.function` (worker tests/workers/collectives.py):
  uneven and empty all-to-all splits, a rank with zero rows, the all-to-all's gradient, allgather with a
  variable first dimension, sums, maximum, the all-ranks vote, broadcasts, barrier, agree, the sparse mean,
  and the fixed-buffer average: bit-equal to the sum in rank order / N on every rank, with ranks arriving
  in a different order.
- A rank that stops (SIGSTOP) is named by the others within the collective deadline, and the job ends.
- After an error one rank reports, that rank exits first (mpirun names it) once the others have cleaned
  up, and the job ends without waiting out the others' grace time.
- `main.py` on the MPI backend: SIGSTOP of a rank mid-training ends the job within the deadline with one
  line per waiting rank naming the stopped one, and leaves no process behind; in steady training (between
  checkpoints) the short step deadline ends it, not the long collective one.

Signals and killed ranks under `main.py` are tested on the stack's backend, the MPI backend on the current
stack: SIGUSR1 to one of two ranks (tests/integration/test_signals.py), a SIGKILLed rank
(test_rank_failure.py), a 3-rank job killed and restarted bit-identically (test_resume_sigkill.py).
"""
from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.support.hybrid import CARDINALITIES, train_flags
from tests.support.multirank import finish, run_ranks, scratch_dir, start_ranks, worker_argv
from tests.support.processes import alive as _alive
from tests.support.processes import rank_lines, rank_pids, wait_until

DEADLINE_SECONDS = 15  # DLRM_COLLECTIVE_TIMEOUT_SECONDS (and the step deadline) of the stalled launches
BOUND_SECONDS = DEADLINE_SECONDS + 30  # deadline, one step, mpirun ending the other ranks (loaded machine)


def _all_gone(pids) -> bool:
    """True if every rank in `pids` ends within a few seconds of the launcher; kills those that do not."""
    pids = list(pids)
    gone = wait_until(lambda: not any(_alive(pid) for pid in pids), timeout=10)
    _clean_up(pids)
    return gone


def _clean_up(pids) -> None:
    """Whatever the test's outcome: no stopped or orphaned rank stays behind."""
    for pid in pids:
        if _alive(pid):
            for number in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, number)
                except ProcessLookupError:
                    pass


@pytest.mark.multirank
@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_every_collective_on_real_ranks(world):
    run = run_ranks(world, worker_argv("collectives", "check"), backend="mpi", timeout=180).check()
    assert sorted(run.results) == list(range(world))
    assert {(r["backend"], r["size"]) for r in run.results.values()} == {("mpi", world)}
    assert len({tuple(r["bits"]) for r in run.results.values()}) == 1  # the same bits on every rank
    # each rank's clock: the ranks that waited in a barrier for a rank 1 s late count (most of) it as waiting
    assert all(run.results[r]["barrier_waited"] > 0.5 for r in range(1, world)), run.results


@pytest.mark.multirank
@pytest.mark.slow
def test_a_stopped_rank_is_named_and_the_job_ends_within_the_deadline():
    run = run_ranks(3, worker_argv("collectives", "stall", "1"), backend="mpi", timeout=120,
                    env={"DLRM_COLLECTIVE_TIMEOUT_SECONDS": "5"})
    pids = [r["pid"] for r in run.results.values()]
    gone = _all_gone(pids)
    assert not run.timed_out and run.returncode != 0, run.stderr[-3000:]
    lines = [text for _, text in rank_lines(run.stdout + run.stderr) if text.startswith("error:")]
    assert lines and set(lines) <= {f"error: rank {r}: no data from rank 1 in 'after_stop' within 5 s (rank dead "
                                    f"or stalled); ending the job" for r in (0, 2)}, lines
    assert len(pids) == 3 and gone


@pytest.mark.multirank
@pytest.mark.slow
def test_the_reporting_rank_leaves_first_once_the_others_cleaned_up():
    from tests.support.processes import first_exit
    from tests.workers.collectives import LEAVE_GRACE_SECONDS

    run = run_ranks(3, worker_argv("collectives", "leave", "1"), backend="mpi", timeout=3 * LEAVE_GRACE_SECONDS)
    ended = time.time()
    gone = _all_gone(r["pid"] for r in run.results.values())
    output = run.stdout + run.stderr
    assert not run.timed_out and run.returncode == 3, output[-3000:]
    assert first_exit(output) == (1, 3), output[-3000:]
    assert [text for _, text in rank_lines(output) if text.startswith("error:")] == ["error: rank 1: reported"]
    cleaned_up = {name for name in os.listdir(run.result_dir) if name.startswith("cleaned_up_")}
    assert cleaned_up == {"cleaned_up_0", "cleaned_up_2"}  # before rank 1 left (mpirun then ended them)
    erred = min(r["erred_at"] for r in run.results.values())
    assert ended - erred < LEAVE_GRACE_SECONDS, ended - erred  # the others' grace was cut short by mpirun
    assert gone


def _training_job(work: str, world: int, env: dict | None = None, checkpoint_every: int = 2):
    """A long `main.py` run on the MPI backend checkpointing every `checkpoint_every` steps; returns
    (launcher, flags, root)."""
    from dlrm.data.synthetic.generator import generate_dataset

    dataset = os.path.join(work, "data")
    if not os.path.exists(dataset):
        generate_dataset(dataset, CARDINALITIES, 16_000, 64, seed=4)  # 1000 steps: far more than we wait
    root = os.path.join(work, "ckpt")
    flags = train_flags(dataset, "adagrad", os.path.join(work, "run"), root, global_batch=16)
    flags += ["--checkpoint_every", str(checkpoint_every), "--log_every", "10", "--backend", "mpi"]
    return start_ranks(world, ["main.py", *flags], env=env, result_dir=work, backend="mpi"), flags, root


def _wait_for_checkpoint(proc, root: str) -> dict:
    from dlrm.train import checkpoint

    assert wait_until(lambda: checkpoint.find_checkpoint(root) is not None or proc.poll() is not None, timeout=200), \
        "no checkpoint within 200 s"
    assert proc.poll() is None, "training ended before the test could act"
    return rank_pids(proc.pid)


def _logged_steps_after_checkpoint(proc, work: str, root: str, steps: int) -> None:
    """Wait until the job has logged `steps` training steps past its checkpoint: training is steady again."""
    from dlrm.train import checkpoint
    from dlrm.train.metrics_log import read_metrics

    saved = checkpoint.read_meta(checkpoint.find_checkpoint(root))["step"]
    metrics = os.path.join(work, "run", "metrics.jsonl")

    def steady() -> bool:
        logged = [r["step"] for r in read_metrics(metrics) if r["kind"] == "train"] if os.path.exists(metrics) else []
        return max(logged, default=0) >= saved + steps or proc.poll() is not None

    assert wait_until(steady, timeout=200), f"no training step logged past {saved + steps} within 200 s"
    assert proc.poll() is None, "training ended before the test could act"


def _signal_mid_training(prefix: str, world: int, rank: int, number: int, env: dict | None = None,
                         checkpoint_every: int = 2, bound: float = BOUND_SECONDS, steady: bool = False):
    """Send `number` to `rank` of a training job once it has a checkpoint (`steady`: and has logged 20 more
    steps, so it is between checkpoints); returns (run, seconds from the signal to the end of the job, pids,
    flags, checkpoint root). No rank stays behind."""
    work = scratch_dir(prefix)
    started = time.monotonic()
    proc, flags, root = _training_job(work, world, env, checkpoint_every)
    pids: dict = {}
    try:
        pids = _wait_for_checkpoint(proc, root)
        if steady:
            _logged_steps_after_checkpoint(proc, work, root, 20)
        else:
            time.sleep(0.5)  # mid-training, possibly mid-checkpoint
        os.kill(pids[rank], number)
        sent_at = time.monotonic()
    finally:
        run = finish(proc, timeout=bound + 60 + time.monotonic() - started, started=started, result_dir=work)
        gone = _all_gone(pids.values())
    seconds = run.elapsed - (sent_at - started)
    print(f"the job ended {seconds:.1f} s after the signal")
    assert not run.timed_out and run.returncode != 0 and seconds < bound, run.stderr[-3000:]
    assert gone, "ranks left behind after the launcher ended"
    return run, seconds, pids, flags, root


# A stopped rank 2 is named either way round, depending on where it stopped: by a peer waiting for its data,
# or by a peer whose data (too big to be buffered) it does not take. A peer that got past the exchange where
# the others wait (its data from every rank arrived) names rank 2 together with the rank still waiting there.
STALLED_RANK_2 = r"(no data from (rank 2|ranks [0-9, ]*\b2)|rank 2 did not take its data)"


@pytest.mark.multirank
@pytest.mark.slow
def test_sigstop_of_a_rank_mid_training_ends_the_job_naming_it():
    run, _, _, _, _ = _signal_mid_training("mpi_stop_", 3, 2, signal.SIGSTOP,
                                           env={"DLRM_COLLECTIVE_TIMEOUT_SECONDS": str(DEADLINE_SECONDS),
                                                "DLRM_STEP_TIMEOUT_SECONDS": str(DEADLINE_SECONDS)})
    lines = [text for _, text in rank_lines(run.stderr) if text.startswith("error:")]
    pattern = re.compile(rf"error: rank [01]: {STALLED_RANK_2} in '[\w.]+' within {DEADLINE_SECONDS} s "
                         r"\(rank dead or stalled\); ending the job$")
    assert lines and all(pattern.match(line) for line in lines), lines


@pytest.mark.multirank
@pytest.mark.slow
def test_a_rank_stopped_in_steady_training_ends_the_job_within_the_step_deadline():
    """Between checkpoints the ranks are in lockstep: the short step deadline applies there, not the long
    collective one (which covers tracing, checkpoints and evaluations)."""
    step_deadline, long_deadline = 8, 200
    run, seconds, _, _, _ = _signal_mid_training(
        "mpi_steady_stop_", 3, 2, signal.SIGSTOP, checkpoint_every=300, bound=step_deadline + 30, steady=True,
        env={"DLRM_COLLECTIVE_TIMEOUT_SECONDS": str(long_deadline), "DLRM_STEP_TIMEOUT_SECONDS": str(step_deadline)})
    lines = [text for _, text in rank_lines(run.stderr) if text.startswith("error:")]
    pattern = re.compile(rf"error: rank [01]: {STALLED_RANK_2} in '[\w.]+' within {step_deadline} s "
                         r"\(rank dead or stalled\); ending the job$")
    assert lines and all(pattern.match(line) for line in lines), lines
    assert seconds < long_deadline


@pytest.mark.multirank
def test_a_run_directory_in_use_stops_every_rank_at_once_with_one_message():
    """Only rank 0 takes the run directory; before the ranks agreed on it, rank 1 waited out the 300 s
    collective deadline after rank 0 refused a directory another run held, then blamed rank 0."""
    from dlrm.data.synthetic.generator import generate_dataset
    from dlrm.dir_lock import DirLock

    work = scratch_dir("run_dir_busy_")
    dataset, run_dir = os.path.join(work, "data"), os.path.join(work, "run")
    generate_dataset(dataset, CARDINALITIES, 512, 64, seed=4)
    os.makedirs(run_dir)
    with DirLock(run_dir, "run.lock", "run directory", "--run_dir") as held:
        assert held.acquire() is None  # another run, as far as the trainer can tell
        flags = train_flags(dataset, "adagrad", run_dir, os.path.join(work, "ckpt"), global_batch=16)
        run = run_ranks(2, ["main.py", *flags, "--max_steps", "1"], backend="mpi", timeout=120)
    assert run.returncode != 0 and not run.timed_out and run.elapsed < 60, (run.elapsed, run.stderr[-3000:])
    errors = [text for _, text in rank_lines(run.stdout + run.stderr) if text.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        f"error: run directory {run_dir} is in use by another run (pid {os.getpid()} on host "), errors
    assert not os.path.exists(os.path.join(work, "ckpt", "latest"))
