"""SIGTERM, SIGUSR1 (Slurm's pre-emption / time-limit warnings) and Ctrl-C sent to real training processes:
the run finishes its step, every rank writes the checkpoint, the process exits with 128 + the signal
number and one line saying where it stopped; the same command then resumes and ends with weights
bit-identical to a run that was never interrupted."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dlrm.dist import single_process
from dlrm.train import checkpoint, stopping
from dlrm.train.metrics_log import read_metrics
from tests.support import ROOT
from tests.support.runs import MAX_STEPS, TIMEOUT, assert_same_final_weights, main_command, run_main


def training_started(run_dir) -> bool:
    """The metrics log has a training record: the loop runs (and the handlers are installed)."""
    try:
        return any(r["kind"] == "train" for r in read_metrics(os.path.join(run_dir, "metrics.jsonl")))
    except OSError:
        return False


def wait_for(condition, process, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "the run ended before the signal could be sent; make it longer"


@pytest.mark.slow
@pytest.mark.parametrize("signal_number", [signal.SIGTERM], ids=["SIGTERM"])
def test_signal_checkpoints_exits_128_plus_signal_and_the_same_command_resumes(tmp_path, signal_number):
    run_main(main_command(tmp_path, "uninterrupted"))  # also generates the dataset the other runs reuse
    command = main_command(tmp_path, "signalled")
    ckpt_root = str(tmp_path / "signalled" / "ckpt")
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: training_started(tmp_path / "signalled" / "run"), process)
        process.send_signal(signal_number)
        stdout, stderr = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)

    assert process.returncode == 128 + signal_number, stdout[-2000:] + stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    stopped_at = checkpoint.read_meta(checkpoint.find_checkpoint(ckpt_root))["step"]
    assert 10 <= stopped_at < MAX_STEPS
    name = signal.Signals(signal_number).name
    assert f"received {name}: stopping after the current step" in stderr
    assert (f"error: stopped by {name} after step {stopped_at}; checkpoint {ckpt_root}/step_{stopped_at:08d} "
            f"written; run the same command again to resume from it") in stderr.splitlines()
    stopped = [r for r in read_metrics(str(tmp_path / "signalled" / "run" / "metrics.jsonl")) if r["kind"] == "stopped"]
    assert [(r["step"], r["reason"]) for r in stopped] == [(stopped_at, f"received {name}")]

    output = run_main(command)  # the very same command
    assert f"restored {ckpt_root}/step_{stopped_at:08d}" in output
    assert_same_final_weights(str(tmp_path / "uninterrupted" / "ckpt"), ckpt_root)


# A process that holds the run's handlers and signals itself, as a terminal does on Ctrl-C.
SIGNAL_TWICE = textwrap.dedent("""
    import os, signal, sys, time
    from dlrm.dist import single_process
    from dlrm.train import stopping
    before = {number: signal.getsignal(number) for number in stopping.STOP_SIGNALS}
    with stopping.StopRequests(single_process()) as requests:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
        print("first:", requests.signal_number, flush=True)
        if sys.argv[1] == "twice":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            print("not reached", flush=True)
    print("restored:", all(signal.getsignal(n) is before[n] for n in stopping.STOP_SIGNALS), flush=True)
""")


@pytest.mark.parametrize("times", ["once", "twice"])
def test_ctrl_c_is_a_stop_request_and_a_second_one_exits_at_once(times):
    done = subprocess.run([sys.executable, "-c", SIGNAL_TWICE, times], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert f"first: {int(signal.SIGINT)}" in done.stdout, done.stderr
    assert "received SIGINT: stopping after the current step and writing a checkpoint (Ctrl-C again exits at " \
           "once, without one)" in done.stderr
    assert "Traceback" not in done.stderr
    if times == "once":  # the process goes on (the trainer stops at the step boundary); handlers put back
        assert done.returncode == 0 and "restored: True" in done.stdout, done.stderr
    else:
        assert done.returncode == 128 + signal.SIGINT and "not reached" not in done.stdout
        assert stopping.EXIT_AT_ONCE_MESSAGE.decode() in done.stderr


def two_rank_flags(work, name):
    from tests.support.hybrid import train_flags

    flags = train_flags(os.path.join(work, "data"), "adagrad", os.path.join(work, name, "run"),
                        os.path.join(work, name, "ckpt"), global_batch=16)
    return ["main.py", *flags, "--max_steps", str(TWO_RANK_STEPS), "--checkpoint_every", "50", "--log_every", "10"]


TWO_RANK_STEPS = 200


@pytest.mark.multirank
@pytest.mark.slow
def test_sigusr1_to_one_of_two_ranks_stops_both_at_one_step_and_the_same_command_resumes():
    """Slurm signals every task; here only rank 1 gets SIGUSR1, so the other rank learns it only through
    the per-step agreement (sent to both, the agreement is the same)."""
    from dlrm.data.synthetic.generator import generate_dataset
    from tests.support.hybrid import CARDINALITIES
    from tests.support.multirank import finish, run_ranks, scratch_dir, start_ranks
    from tests.support.processes import first_exit, rank_lines, rank_pids

    work = scratch_dir("signals_")
    generate_dataset(os.path.join(work, "data"), CARDINALITIES, 16_000, 64, seed=4)  # 1000 steps per epoch
    run_ranks(2, two_rank_flags(work, "uninterrupted"), timeout=120).check()

    argv = two_rank_flags(work, "signalled")
    started = time.monotonic()
    launcher = start_ranks(2, argv, result_dir=work)
    try:
        wait_for(lambda: training_started(os.path.join(work, "signalled", "run")), launcher, timeout=120)
        os.kill(rank_pids(launcher.pid)[1], signal.SIGUSR1)
    finally:
        run = finish(launcher, timeout=120, started=started, result_dir=work)
    assert not run.timed_out and run.returncode != 0
    ckpt_root = os.path.join(work, "signalled", "ckpt")
    stopped_at = checkpoint.read_meta(checkpoint.find_checkpoint(ckpt_root))["step"]
    assert 10 <= stopped_at < TWO_RANK_STEPS
    output = run.stdout + run.stderr
    # Both ranks stop with the same error; rank 0 prints it and exits first (the other rank waits for it:
    # dlrm.cli_errors), then the launcher ends rank 1.
    assert first_exit(output) == (0, 128 + signal.SIGUSR1)
    assert (f"error: stopped by SIGUSR1 after step {stopped_at}; checkpoint {ckpt_root}/step_{stopped_at:08d} "
            f"written; run the same command again to resume from it") in output
    assert not [text for _, text in rank_lines(output) if "Traceback" in text], output[-3000:]  # not the launcher's
    print(output[-3000:])

    resumed = run_ranks(2, argv, timeout=120).check()  # the very same command
    assert f"restored {ckpt_root}/step_{stopped_at:08d}" in resumed.stdout
    assert_same_final_weights(os.path.join(work, "uninterrupted", "ckpt"), ckpt_root, step=TWO_RANK_STEPS)


def test_a_signal_during_an_evaluation_stops_it_at_the_next_batch():
    """A long evaluation between steps must not delay the checkpoint past Slurm's KillWait: the signal
    is agreed on at every evaluation batch (one process: the agreement needs no peer)."""
    pending = iter([None, None, signal.SIGTERM])
    batches = stopping.read_together(range(10), single_process(), lambda: next(pending))
    with pytest.raises(stopping.StopAgreed) as stopped:
        list(batches)
    assert stopped.value.signal_number == signal.SIGTERM and stopped.value.failed_rank is None
