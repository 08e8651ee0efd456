"""Replace a file or a directory atomically: a reader, or a crash at any moment, sees the old content or the new,
never a mix; remove a directory so that no partial copy is left under its name.

Leaf module (standard library only) shared by the checkpoints, the feature spec, the sweep launcher, the
preprocessing outputs and report, the synthetic generators' ground truth and the predictions file.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
from typing import IO, Iterator, Union


def fsync_dir(path: str) -> None:
    """Flush a directory entry (a rename or a new file in it) to disk: a rename alone is not durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomically(path: Union[str, os.PathLike], text: str) -> None:
    """Write `text` (UTF-8) to a temp file next to `path`, fsync it, rename it over `path`, fsync the directory."""
    with replaced_atomically(path, binary=False) as f:
        f.write(text)


@contextlib.contextmanager
def replaced_atomically(path: Union[str, os.PathLike], binary: bool = True) -> Iterator[IO]:
    """A file to write `path`'s new content into, streamed (no need to hold it all in memory).

    The content goes to a temp file next to `path`; when the block ends normally it is fsynced and renamed
    over `path` and the directory is fsynced. If the block raises, `path` is untouched and the temp file is
    removed. An OSError names the file.
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp.{os.getpid()}"  # per process: two writers never share a temp file
    try:
        with (open(tmp, "wb") if binary else open(tmp, "w", encoding="utf-8")) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if os.path.exists(tmp):
            os.unlink(tmp)  # a failed write (disk full, ...) leaves no temp file behind
        if isinstance(error, OSError):
            raise naming_file(error, path) from error
        raise
    fsync_dir(os.path.dirname(path) or ".")


def replace_dir(target: str, complete: str, aside: str) -> None:
    """Put the directory `complete` in place of `target` by two renames (the old `target` goes to `aside`,
    then is deleted); if the second rename fails, the old target is put back. A kill at any moment leaves
    under `target` the old directory, nothing, or the new one, whole; at worst `aside` is left over."""
    shutil.rmtree(aside, ignore_errors=True)  # left over by a killed run
    if os.path.lexists(target):
        os.rename(target, aside)
    try:
        os.rename(complete, target)
    except OSError:
        if os.path.lexists(aside):
            os.rename(aside, target)
        raise
    fsync_dir(os.path.dirname(target) or ".")
    shutil.rmtree(aside, ignore_errors=True)


def remove_dir(path: str, aside: str) -> None:
    """Delete the directory `path` by renaming it to `aside` first: a kill during the deletion leaves a partial
    `aside` (for the caller to clear later), never a partial `path`."""
    shutil.rmtree(aside, ignore_errors=True)  # left over by a killed run
    os.rename(path, aside)
    fsync_dir(os.path.dirname(path) or ".")
    shutil.rmtree(aside, ignore_errors=True)


def naming_file(error: OSError, path: Union[str, os.PathLike]) -> OSError:
    """`error`, naming `path` if it names no file (a failed `write()` says "No space left on device" only)."""
    if error.filename:
        return error
    return OSError(error.errno, error.strerror or str(error), os.fspath(path))


def describe_os_error(error: OSError) -> str:
    """`<file>: <reason> (<ERRNO NAME>)`, e.g. `.../r0-10_c0-4.npy: No space left on device (ENOSPC)`."""
    code = errno.errorcode.get(error.errno) if error.errno else None
    reason = error.strerror or str(error)
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{reason}" + (f" ({code})" if code else "")
