"""The checkpoint directory: its lock, the writable/space checks, publishing, pruning and finding checkpoints."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from typing import List, Optional

from dlrm.atomic import describe_os_error, fsync_dir, write_text_atomically
from dlrm.sizes import format_bytes
from dlrm.train.checkpoint.files import STEP_DIR, CheckpointError, step_dir_name

LATEST = "latest"
META = "meta.json"
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


def complete_checkpoints(root: str) -> List[str]:
    """Names of complete checkpoint directories under `root`, oldest first."""
    if not os.path.isdir(root):
        return []
    names = [name for name in os.listdir(root)
             if STEP_DIR.match(name) and os.path.isfile(os.path.join(root, name, META))]
    return sorted(names)


def _prune(root: str, keep: int, protect: str) -> None:
    names = complete_checkpoints(root)
    for name in names[:max(0, len(names) - keep)]:
        if name != protect:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def find_checkpoint(path: str) -> Optional[str]:
    """A complete checkpoint directory for `path` (itself, or `latest` / the newest under a root)."""
    if os.path.isfile(os.path.join(path, META)) and not path.rstrip("/").endswith(".tmp"):
        return path
    latest_file = os.path.join(path, LATEST)
    if os.path.isfile(latest_file):
        with open(latest_file, encoding="utf-8", errors="replace") as f:  # garbled: matches no step_* name
            name = f.read().strip()
        if STEP_DIR.match(name) and os.path.isfile(os.path.join(path, name, META)):
            return os.path.join(path, name)
    names = complete_checkpoints(path)  # `latest` missing or unusable: newest complete directory
    return os.path.join(path, names[-1]) if names else None


def read_meta(checkpoint_dir: str) -> dict:
    """The checkpoint's meta.json; a file that cannot be read or parsed is named in a CheckpointError."""
    path = os.path.join(checkpoint_dir, META)
    try:
        with open(path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {checkpoint_dir} is damaged: {path} cannot be read: "
                              f"{getattr(error, 'strerror', None) or error}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {checkpoint_dir} is damaged: {path} holds no JSON object")
    return meta
