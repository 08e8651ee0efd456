"""The checkpoint directory: its lock, the writable/space checks, publishing and pruning (finding a checkpoint and
reading its meta.json: `dlrm.checkpoint_layout`)."""
from __future__ import annotations

import os
import shutil
import socket
from typing import Optional

from dlrm.atomic import describe_os_error, fsync_dir, remove_dir, replace_dir, write_text_atomically
from dlrm.checkpoint_layout import (  # noqa: F401 (the package's names for them)
    DELETING,
    LATEST,
    META,
    UNFINISHED,
    WRITING,
    CheckpointError,
    complete_checkpoints,
    find_checkpoint,
    read_meta,
    step_dir_name,
)
from dlrm.dir_lock import DirLock
from dlrm.sizes import format_bytes

LOCK = "lock"


class CheckpointDirLock(DirLock):
    """`<root>/lock`: one run at a time writes a checkpoint directory (`dlrm.dir_lock`)."""

    def __init__(self, root: str):
        super().__init__(root, LOCK, "checkpoint directory", "--save_checkpoint_path")


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
    """Make the complete `tmp` the checkpoint `final` and point `latest` at it, then prune.

    Only renames touch `step_*` names (a checkpoint written again for the same step, e.g. by a rerun, is
    replaced by renames, and pruned ones are renamed to `step_X.deleting` before they are deleted), so a
    kill at any moment leaves no partial directory under a checkpoint's name."""
    for directory, _, _ in os.walk(tmp):
        fsync_dir(directory)
    replace_dir(final, tmp, aside=final + DELETING)
    write_text_atomically(os.path.join(root, LATEST), step_dir_name(step) + "\n")
    _prune(root, keep, protect=step_dir_name(step))


def _prune(root: str, keep: int, protect: str) -> None:
    """Delete all but the newest `keep` complete checkpoints (never `protect`) and what killed runs left
    (`step_X.tmp`, `step_X.deleting`: this run holds the lock and is writing none)."""
    names = complete_checkpoints(root)
    for name in names[:max(0, len(names) - keep)]:
        if name != protect:
            path = os.path.join(root, name)
            try:
                remove_dir(path, aside=path + DELETING)
            except OSError:
                pass  # the new checkpoint is published; an old one that cannot be deleted stays loadable
    for name in os.listdir(root):
        if UNFINISHED.match(name):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
