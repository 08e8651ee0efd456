"""The checkpoint directory: refused at start-up when unwritable, too small or used by another run;
a full disk during a save names the file and ENOSPC and leaves the previous checkpoint current.

Real failures only: a read-only tmpfs mount (root ignores permission bits, so an unprivileged user
gets a chmod 555 directory instead), a tiny tmpfs that really fills up, a lock held by another real
process (then killed with SIGKILL), and 2-rank launches where one rank fails and the other must stop too.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from dlrm.checkpoint_layout import STEP_DIR
from dlrm.cli_errors import user_error_text
from dlrm.dist import single_process
from dlrm.embedding.base import TablePiece
from dlrm.errors import PeerRankFailed
from dlrm.train import checkpoint as ckpt
from dlrm.train.checkpoint import CheckpointError
from tests.support import ROOT
from tests.support.multirank import (
    finish,
    rank_env,
    read_rank_results,
    run_ranks,
    scratch_dir,
    start_ranks,
    worker_argv,
)
from tests.support.processes import wait_until

SINGLE = single_process()  # a world of one, without Horovod

IS_ROOT = os.geteuid() == 0
READ_ONLY_REASON = r"\((EROFS|EACCES)\)"  # a read-only mount as root, a chmod 555 directory otherwise


@contextlib.contextmanager
def tmpfs(directory, size: str):
    """A real tmpfs of `size` mounted on `directory` for the duration of the block."""
    if not IS_ROOT:
        pytest.skip("mounting a tmpfs needs root (CI runs the suite as root)")
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", directory], check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", directory], check=True)


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write: a read-only mount (root), else a chmod 555 directory."""
    directory = tmp_path / "read_only"
    if not IS_ROOT:
        directory.mkdir()
        directory.chmod(0o555)
        yield str(directory)
        directory.chmod(0o755)
        return
    with tmpfs(directory, "1m"):
        subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)
        yield str(directory)


def _lock_is_free(root: str) -> bool:
    with ckpt.CheckpointDirLock(root) as lock:
        return lock.acquire() is None and lock.held


TABLE_NAMES = ["t0", "t1"]


def _pieces(rows: int, value: float, table: int = 0):
    return [(TablePiece(table, 0, rows, 0, 64), {"value": tf.Variable(np.full((rows, 64), value, np.float32))})]


def _dense():
    return {"000_kernel": tf.Variable(np.ones((3, 5), np.float32)), "optimizer.iterations": tf.Variable(np.int64(7))}


def _save(root, step, pieces, dense=None):
    meta = {"model_shape": {"tables": [{"name": "t0", "rows": pieces[0][0].row_end, "dim": 64}]}}
    return ckpt.save_checkpoint(root, step, dense or {}, pieces, meta, group=SINGLE, table_names=TABLE_NAMES)


# --------------------------------------------------------------------------------- start-up checks

def test_read_only_checkpoint_dir_is_refused_with_its_path_and_the_reason(read_only_dir):
    for root in (read_only_dir, os.path.join(read_only_dir, "ckpt")):  # the mount itself, and below it
        with pytest.raises(CheckpointError, match=rf"^cannot write checkpoints to {re.escape(root)} "
                                                  rf"\(--save_checkpoint_path\): .*{READ_ONLY_REASON}$"):
            ckpt.prepare_checkpoint_dir(root, 1000, SINGLE)


def test_too_small_filesystem_is_refused_and_one_with_room_is_locked(tmp_path):
    with tmpfs(tmp_path / "small", "1m") as root:
        with pytest.raises(CheckpointError, match=rf"^not enough free space for checkpoints in {re.escape(root)} "
                                                  r".*needs about 2\.00 MiB \(2097152 bytes.*, 1\.00 MiB are free$"):
            ckpt.prepare_checkpoint_dir(root, 2 << 20, SINGLE)
        with ckpt.prepare_checkpoint_dir(root, 512 << 10, SINGLE) as lock:
            assert lock.held
            holder = open(os.path.join(root, "lock")).read()
            assert holder.startswith(f"pid {os.getpid()} on host {socket.gethostname()} since ")
        assert not lock.held
        assert os.listdir(root) == ["lock"]  # the write test leaves nothing else behind


def test_size_estimate_covers_what_a_save_writes(tmp_path):
    dense, pieces = _dense(), _pieces(300, 1.0) + _pieces(7, 2.0, table=1)
    estimate = ckpt.checkpoint_bytes(dense, pieces, rank=0)
    directory = _save(str(tmp_path), 1, pieces, dense)
    written = [os.path.join(folder, name) for folder, _, names in os.walk(directory) for name in names]
    used = sum(os.stat(path).st_blocks * 512 for path in written + [str(tmp_path / "latest")])
    assert used <= estimate <= used + len(written) * ckpt.FILE_OVERHEAD_BYTES + ckpt.META_BYTES
    assert ckpt.checkpoint_bytes(dense, [], rank=1) == 0  # only rank 0 writes the dense variables


HOLDER = """import sys, time
from dlrm.dist import single_process
from dlrm.train import checkpoint
lock = checkpoint.prepare_checkpoint_dir(sys.argv[1], 1000, single_process())
print("locked", flush=True)
time.sleep(300)
"""


@contextlib.contextmanager
def _lock_held_by_another_process(root: str):
    """A real second process holding the directory's lock; killed with SIGKILL at the end of the block."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, root], cwd=ROOT, env=rank_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()  # SIGKILL: the holder runs no clean-up code
        holder.wait()
        holder.stdout.close()


def test_second_writer_is_refused_naming_the_holder_until_the_holder_is_killed(tmp_path):
    root = str(tmp_path / "ckpt")
    with _lock_held_by_another_process(root) as holder:
        with pytest.raises(CheckpointError, match=rf"^checkpoint directory {re.escape(root)} is in use by another "
                                                  rf"run \(pid {holder.pid} on host {re.escape(socket.gethostname())}"
                                                  r" since .*\): .*use another --save_checkpoint_path$"):
            ckpt.prepare_checkpoint_dir(root, 1000, SINGLE)
    with ckpt.prepare_checkpoint_dir(root, 1000, SINGLE) as lock:  # the stale lock file is no obstacle
        assert lock.held


# ----------------------------------------------------------------------------------------- disk full

@pytest.mark.parametrize("chunk_rows", [None, 1000], ids=["whole", "row_chunks"])
def test_disk_full_names_the_file_and_enospc_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, chunk_rows):
    if chunk_rows:
        monkeypatch.setattr(ckpt.files, "_CHUNK_ROWS", chunk_rows)  # the big-table path (it used a memory map)
    with tmpfs(tmp_path / "full", "1m") as root:
        _save(root, 1, _pieces(10, 1.0))
        with pytest.raises(CheckpointError) as raised:
            _save(root, 2, _pieces(5000, 2.0), _dense())  # 1.2 MiB of weights: does not fit
        step_2, step_1 = os.path.join(root, "step_00000002"), os.path.join(root, "step_00000001")
        assert str(raised.value) == (
            f"cannot write checkpoint {step_2}: {step_2}.tmp/embedding/t0/value/r0-5000_c0-64.npy: "
            f"No space left on device (ENOSPC); the partial {step_2}.tmp is removed, "
            f"the last complete checkpoint is {step_1}")
        assert sorted(os.listdir(root)) == ["latest", "step_00000001"]
        assert open(os.path.join(root, "latest")).read() == "step_00000001\n"
        restored = _pieces(10, 0.0)
        ckpt.restore_checkpoint(ckpt.find_checkpoint(root), {}, restored, group=SINGLE, table_names=TABLE_NAMES)
        np.testing.assert_array_equal(restored[0][1]["value"].numpy(), np.ones((10, 64), np.float32))


# ---------------------------------------------------------------------------------- killed mid-delete

KILLED_DURING_DELETION = """import os, signal, sys
import numpy as np, tensorflow as tf
from dlrm.dist import single_process
from dlrm.embedding.base import TablePiece
from dlrm.train import checkpoint
real_unlink, deleted = os.unlink, []
def unlink_then_die(*args, **kwargs):  # SIGKILL this process once a deletion has removed one file
    if deleted:
        os.kill(os.getpid(), signal.SIGKILL)
    deleted.append(real_unlink(*args, **kwargs))
os.unlink = unlink_then_die
root, step = sys.argv[1], int(sys.argv[2])
pieces = [(TablePiece(0, 0, 300, 0, 64), {"value": tf.Variable(np.full((300, 64), 9.0, np.float32))})]
meta = {"model_shape": {"tables": [{"name": "t0", "rows": 300, "dim": 64}]}}
checkpoint.save_checkpoint(root, step, {}, pieces, meta, keep=3, group=single_process(), table_names=["t0"])
"""


def _complete_dirs(root):
    """The `step_*` directories under `root`, each verified file by file against its manifest."""
    names = sorted(name for name in os.listdir(root) if STEP_DIR.match(name))
    for name in names:
        ckpt.check_share(os.path.join(root, name), rank=0, size=1)  # raises naming a missing or damaged file
    return names


@pytest.mark.parametrize("step", [4, 3], ids=["pruning_the_oldest", "replacing_the_same_step"])
def test_a_kill_while_a_checkpoint_is_deleted_leaves_no_partial_checkpoint(tmp_path, step):
    """A save prunes the oldest checkpoint (step 4) or replaces one written again (step 3); the process is
    SIGKILLed after the first file of that deletion: every `step_*` left is whole; the same save run again
    succeeds and clears what the killed one left."""
    root = str(tmp_path / "ckpt")
    for earlier in (1, 2, 3):
        _save(root, earlier, _pieces(300, float(earlier)))
    killed = subprocess.run([sys.executable, "-c", KILLED_DURING_DELETION, root, str(step)], cwd=ROOT,
                            env=rank_env(), capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr[-2000:]
    left_over = f"step_{1 if step == 4 else step:08d}.deleting"
    assert left_over in os.listdir(root)
    kept = ["step_00000002", "step_00000003", "step_00000004"] if step == 4 else \
        ["step_00000001", "step_00000002", "step_00000003"]
    assert _complete_dirs(root) == kept
    restored = _pieces(300, 0.0)
    ckpt.restore_checkpoint(ckpt.find_checkpoint(root), {}, restored, group=SINGLE, table_names=TABLE_NAMES)
    assert float(restored[0][1]["value"][0, 0]) == 9.0  # the killed save's checkpoint, whole

    os.makedirs(os.path.join(root, "step_00000009.tmp"))  # and a save killed while writing
    _save(root, step, _pieces(300, 5.0))
    assert sorted(os.listdir(root)) == ["latest", *_complete_dirs(root)] == ["latest", *kept]


# --------------------------------------------------------------------------------------- the trainer

def _train(tmp_path, save_path, *flags):
    from dlrm.cli import parse_config
    from dlrm.train.run import run
    from tests.support.runs import SMALL

    config = parse_config(["--synthetic_dir", str(tmp_path / "data"), "--run_dir", str(tmp_path / "run"),
                           "--save_checkpoint_path", save_path, "--max_steps", "2", *SMALL, *flags])
    return run(config)


def _trained_steps(tmp_path) -> list:
    from dlrm.train.metrics_log import read_metrics

    path = tmp_path / "run" / "metrics.jsonl"
    return [r["step"] for r in read_metrics(str(path)) if r["kind"] == "train"] if path.exists() else []


def test_training_stops_before_step_1_on_an_unwritable_or_busy_checkpoint_dir(tmp_path, read_only_dir):
    with pytest.raises(CheckpointError, match=rf"cannot write checkpoints to {re.escape(read_only_dir)} .*"
                                              rf"{READ_ONLY_REASON}"):
        _train(tmp_path, read_only_dir)
    assert _trained_steps(tmp_path) == []

    root = str(tmp_path / "ckpt")
    with _lock_held_by_another_process(root):
        with pytest.raises(CheckpointError, match=rf"checkpoint directory {re.escape(root)} is in use by another run"):
            _train(tmp_path, root)
    assert _trained_steps(tmp_path) == [] and ckpt.find_checkpoint(root) is None

    result = _train(tmp_path, root)  # the holder is gone: this run trains, saves and releases the lock
    assert result.checkpoint == os.path.join(root, "step_00000002") and _trained_steps(tmp_path) == [2]
    assert _lock_is_free(root)


def test_training_that_fills_the_disk_stops_naming_the_file_and_keeps_the_last_checkpoint(tmp_path):
    """One checkpoint of this model takes 3.3 MB (3.5 MB estimated): a 5 MB tmpfs passes the start-up
    check and holds the step-1 checkpoint, then the step-2 save runs out of space half way."""
    with tmpfs(tmp_path / "disk", "5m") as root:
        step_1, step_2 = os.path.join(root, "step_00000001"), os.path.join(root, "step_00000002")
        with pytest.raises(CheckpointError, match=rf"^cannot write checkpoint {re.escape(step_2)}: "
                                                  rf"{re.escape(step_2)}\.tmp/\S+\.npy: No space left on device "
                                                  rf"\(ENOSPC\); the partial {re.escape(step_2)}\.tmp is removed, "
                                                  rf"the last complete checkpoint is {re.escape(step_1)}$"):
            _train(tmp_path, root, "--checkpoint_every", "1", "--max_steps", "3")
        assert _trained_steps(tmp_path) == [2]
        assert sorted(os.listdir(root)) == ["latest", "lock", "step_00000001"]
        assert ckpt.find_checkpoint(root) == step_1 and _lock_is_free(root)


# ------------------------------------------------------------------------------------------ 2 ranks

@pytest.mark.multirank
def test_a_two_rank_run_locks_once_and_a_second_two_rank_run_is_refused(tmp_path):
    root, release = str(tmp_path / "ckpt"), str(tmp_path / "release")
    first_dir = scratch_dir("ckpt_lock_first_")
    started = time.monotonic()
    hold = worker_argv("checkpoint_dir", "prepare", root, "--hold-until", release)
    first = start_ranks(2, hold, result_dir=first_dir)
    try:
        holding = wait_until(lambda: len(read_rank_results(first_dir)) == 2 or first.poll() is not None, 120)
        second = run_ranks(2, worker_argv("checkpoint_dir", "prepare", root), timeout=120) if holding else None
    finally:
        open(release, "w").close()
        first_run = finish(first, timeout=180, started=started, result_dir=first_dir)
    first_run.check()
    assert [first_run.results[r]["outcome"] for r in (0, 1)] == ["ok", "ok"], first_run.results  # no self-lockout
    assert [first_run.results[r]["lock_held"] for r in (0, 1)] == [True, False]  # one holder per run: rank 0
    second.check()
    assert second.results[1] == {"outcome": "PeerRankFailed", "message": PeerRankFailed(0).args[0], "printed": None}
    assert second.results[0]["outcome"] == "CheckpointError"
    assert re.match(rf"^error: rank 0: checkpoint directory {re.escape(root)} is in use by another run "
                    rf"\(pid {first_run.results[0]['pid']} on host .*\(host {re.escape(socket.gethostname())}\)$",
                    second.results[0]["printed"])


@pytest.mark.multirank
def test_a_read_only_path_on_one_rank_stops_both_ranks_with_one_message(tmp_path, read_only_dir):
    root = str(tmp_path / "ckpt")
    run = run_ranks(2, worker_argv("checkpoint_dir", "prepare", root, read_only_dir), timeout=120).check()
    assert run.results[0] == {"outcome": "PeerRankFailed", "message": PeerRankFailed(1).args[0], "printed": None}
    assert run.results[1]["outcome"] == "CheckpointError"
    assert re.match(rf"^error: rank 1: cannot write checkpoints to {re.escape(read_only_dir)} .*{READ_ONLY_REASON} "
                    rf"\(host {re.escape(socket.gethostname())}\)$", run.results[1]["printed"])
    assert _lock_is_free(root)  # rank 0 took the lock, then let it go


@pytest.mark.multirank
def test_disk_full_on_one_rank_stops_both_ranks_and_removes_the_partial_checkpoint(tmp_path):
    # Rank 1's piece (2 MB) cannot fit the 1 MiB disk. Rank 0's small piece fits unless rank 1 filled the disk
    # first, which is a matter of timing: either way the lowest failing rank reports, once, and the other stops.
    with tmpfs(tmp_path / "full", "1m") as root:
        run = run_ranks(2, worker_argv("checkpoint_dir", "save", root, "--rows-of-rank-1", "8000"), timeout=120).check()
        step_2 = os.path.join(root, "step_00000002")
        reporter = 0 if run.results[0]["outcome"] == "CheckpointError" else 1
        table, rows, also = ("t0", 4, " (also on rank 1)") if reporter == 0 else ("t1", 8000, "")
        message = (f"cannot write checkpoint {step_2}: "
                   f"{step_2}.tmp/embedding/{table}/value/r0-{rows}_c0-64.npy: No space left on device (ENOSPC){also}; "
                   f"the partial {step_2}.tmp is removed, the last complete checkpoint is {root}/step_00000001 "
                   f"(host {socket.gethostname()})")
        assert run.results[reporter] == {"outcome": "CheckpointError", "message": message,
                                         "printed": f"error: rank {reporter}: {message}"}
        other = 1 - reporter
        assert run.results[other] == {"outcome": "PeerRankFailed", "message": PeerRankFailed(reporter).args[0],
                                      "printed": None}
        assert sorted(os.listdir(root)) == ["latest", "step_00000001"]


def test_checkpoint_errors_every_rank_raises_alike_are_printed_by_rank_0_only():
    error = CheckpointError("checkpoint ckpt/step_00000002 was written with --global_batch_size 512, ...")
    assert [user_error_text(error, rank, 2) for rank in (0, 1)] == [f"error: {error}", None]


@pytest.mark.multirank
def test_a_piece_missing_on_one_rank_stops_both_ranks_at_restore_with_one_message(tmp_path):
    root = str(tmp_path / "ckpt")
    run = run_ranks(2, worker_argv("checkpoint_dir", "restore", root), timeout=120).check()
    assert run.results[0] == {"outcome": "PeerRankFailed", "message": PeerRankFailed(1).args[0], "printed": None}
    assert run.results[1]["outcome"] == "CheckpointError"
    assert re.match(r"^error: rank 1: checkpoint \S+ is damaged: \S+/t1/value/r0-4_c0-64\.npy \(table 't1', "
                    r"slot 'value', piece r0-4_c0-64\) cannot be read: No such file or directory \(host .*\)$",
                    run.results[1]["printed"]), run.results[1]
