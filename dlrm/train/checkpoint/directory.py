"""The checkpoint directory: its lock, the writable/space checks, publishing and pruning (finding a checkpoint and
reading its meta.json: `dlrm.checkpoint_layout`)."""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import socket
import sys
import time
from typing import Optional

from dlrm.atomic import describe_os_error, fsync_dir, write_text_atomically
from dlrm.checkpoint_layout import (  # noqa: F401 (the package's names for them)
    LATEST,
    META,
    CheckpointError,
    complete_checkpoints,
    find_checkpoint,
    read_meta,
    step_dir_name,
)
from dlrm.sizes import format_bytes

LOCK = "lock"

_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # the filesystem has no (working) flock


class CheckpointDirLock:
    """An exclusive `flock` on `<root>/lock`: one run at a time writes a checkpoint directory.

    The kernel drops the lock when the holder closes it or dies (even by SIGKILL), so a lock file left
    behind never blocks a restart; the file names the holder (pid, host, start time) for the message a
    second run gets. The file is never deleted (deleting it would let two runs lock two different files).
    """

    def __init__(self, root: str):
        self.root = root
        self.path = os.path.join(root, LOCK)
        self._fd: Optional[int] = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> Optional[str]:
        """Take the lock without waiting; None, or why not (another run holds it, no flock there)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            return f"cannot lock {self.root}: {describe_os_error(error)}"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
            started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {started}\n".encode(), 0)
        except OSError as error:
            busy = error.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() if busy else ""
            os.close(fd)
            if busy:
                return (f"checkpoint directory {self.root} is in use by another run ({holder or 'holder unknown'}): "
                        f"two runs must not write one directory; wait for that run to end or use another "
                        f"--save_checkpoint_path")
            if error.errno in _NO_LOCKS:  # e.g. a Lustre mount without `flock`: run unlocked, but say so
                print(f"warning: {self.root} does not support file locks ({describe_os_error(error)}); a second "
                      f"run on this checkpoint directory would not be detected", file=sys.stderr, flush=True)
                return None
            return f"cannot lock {self.path}: {describe_os_error(error)}"
        self._fd = fd
        return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> "CheckpointDirLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def writable(root: str) -> Optional[str]:
    """None if this process can create `root` and write, fsync and delete a file in it; else why not."""
    probe = os.path.join(root, f".write_test.{socket.gethostname()}.{os.getpid()}")
    try:
        os.makedirs(root, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"checkpoint directory write test\n")
            f.flush()
            os.fsync(f.fileno())
        os.remove(probe)
    except OSError as error:
        return f"cannot write checkpoints to {root} (--save_checkpoint_path): {describe_os_error(error)}"
    return None


def enough_space(root: str, needed: int) -> Optional[str]:
    stats = os.statvfs(root)
    free = stats.f_bavail * stats.f_frsize
    if free >= needed:
        return None
    return (f"not enough free space for checkpoints in {root} (--save_checkpoint_path): one checkpoint of this "
            f"model needs about {format_bytes(needed, round_up=True)} ({needed} bytes: weights, optimizer slots "
            f"and dense variables), {format_bytes(free)} are free")


def make_tmp_dir(root: str, tmp: str) -> None:
    os.makedirs(root, exist_ok=True)
    if os.path.exists(tmp):
        shutil.rmtree(tmp)  # left over by a killed run: never complete, never loaded
    os.makedirs(os.path.join(tmp, "dense"))
    os.makedirs(os.path.join(tmp, "embedding"))


def publish(root: str, tmp: str, final: str, step: int, keep: int) -> None:
    """Make the complete `tmp` the checkpoint `final` and point `latest` at it."""
    for directory, _, _ in os.walk(tmp):
        fsync_dir(directory)
    if os.path.exists(final):  # same step written again (e.g. a rerun): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    write_text_atomically(os.path.join(root, LATEST), step_dir_name(step) + "\n")
    _prune(root, keep, protect=step_dir_name(step))


def _prune(root: str, keep: int, protect: str) -> None:
    names = complete_checkpoints(root)
    for name in names[:max(0, len(names) - keep)]:
        if name != protect:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
