"""An exclusive `flock` on a file in a directory: one run at a time writes that directory.

The kernel drops the lock when the holder closes it or dies (even by SIGKILL), so a lock file left
behind never blocks a restart; the file names the holder (pid, host, start time) for the message a
second run gets. The file is never deleted (deleting it would let two runs lock two different files).
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
import time
from typing import Optional

from dlrm.atomic import describe_os_error

_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # the filesystem has no (working) flock


class DirLock:
    """The lock of directory `root` (its file `name`), which a run writes as `what` given by `flag`."""

    def __init__(self, root: str, name: str, what: str, flag: str):
        self.root, self.what, self.flag = root, what, flag
        self.path = os.path.join(root, name)
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
                return (f"{self.what} {self.root} is in use by another run ({holder or 'holder unknown'}): "
                        f"two runs must not write one directory; wait for that run to end or use another "
                        f"{self.flag}")
            if error.errno in _NO_LOCKS:  # e.g. a Lustre mount without `flock`: run unlocked, but say so
                print(f"warning: {self.root} does not support file locks ({describe_os_error(error)}); a second "
                      f"run on this {self.what} would not be detected", file=sys.stderr, flush=True)
                return None
            return f"cannot lock {self.path}: {describe_os_error(error)}"
        self._fd = fd
        return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> "DirLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
