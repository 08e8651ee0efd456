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

from dlrm.train import checkpoint, stopping
from dlrm.train.metrics_log import read_metrics
from tests.test_resume_sigkill import (MAX_STEPS, ROOT, TIMEOUT, assert_same_final_weights, main_command,
                                       run_main)


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
@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT])
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
    from dlrm.train import stopping
    before = {number: signal.getsignal(number) for number in stopping.STOP_SIGNALS}
    with stopping.StopRequests() as requests:
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
                          timeout=60, env=dict(os.environ, PYTHONPATH=ROOT))
    assert f"first: {int(signal.SIGINT)}" in done.stdout, done.stderr
    assert "received SIGINT: stopping after the current step and writing a checkpoint (Ctrl-C again exits at " \
           "once, without one)" in done.stderr
    assert "Traceback" not in done.stderr
    if times == "once":  # the process goes on (the trainer stops at the step boundary); handlers put back
        assert done.returncode == 0 and "restored: True" in done.stdout, done.stderr
    else:
        assert done.returncode == 128 + signal.SIGINT and "not reached" not in done.stdout
        assert stopping.EXIT_AT_ONCE_MESSAGE.decode() in done.stderr
