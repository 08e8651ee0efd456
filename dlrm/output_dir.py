"""The one rule for every output directory a command writes (a dataset, a SavedModel).

- A target that is a file, a symbolic link or a mount point (which the final rename cannot replace) is
  refused, named.
- An existing non-empty directory is refused unless the command's --overwrite is given, and --overwrite
  replaces only an earlier output of the same kind (a directory holding its marker file), never an
  unrelated directory.
- The output is written aside (`<out>.tmp-<pid>`) and renamed into place complete: old and new files never
  mix, and a run that fails or is interrupted leaves the target as it was (a kill between the two renames
  that replace an earlier output leaves it in `<out>.old-<pid>`). A failed run's diagnostics (the
  preprocessing's quarantine and report) stay in `<out>.tmp-<pid>`, the rest of it is removed.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from typing import Iterator, Optional

from dlrm.atomic import describe_os_error, replace_dir
from dlrm.errors import UserError


class OutputDirError(UserError):
    """An output directory in the way (a file, an unrelated directory, an earlier output without
    --overwrite) or one that cannot be written."""

    on_every_rank = True  # checked alike on every rank that checks it


@dataclass(frozen=True)
class OutputDir:
    """An output directory as a command names it: `flag` and `path` for messages, `kind` and `marker`
    (a file every complete output of this kind holds) to recognise an earlier one."""

    path: str
    flag: str
    kind: str
    marker: str
    overwrite_flag: Optional[str] = "--overwrite"  # None: the command has no such flag

    def check(self, overwrite: bool) -> str:
        """The target as an absolute path; raises OutputDirError if it is in the way or cannot be made."""
        target = os.path.abspath(self.path)
        named = f"{self.flag} {self.path}"
        if os.path.islink(target):
            raise OutputDirError(f"{named} is a symbolic link: name the directory it points to "
                                 f"({os.path.realpath(target)})")
        if os.path.lexists(target) and not os.path.isdir(target):
            raise OutputDirError(f"{named} exists and is not a directory")
        if os.path.ismount(target):
            raise OutputDirError(f"{named} is a mount point, which a finished output cannot be renamed over: "
                                 f"write into a directory below it")
        try:
            holds_files = os.path.isdir(target) and bool(os.listdir(target))
        except OSError as error:
            raise OutputDirError(f"cannot read {named}: {describe_os_error(error)}") from None
        if holds_files:
            if not os.path.exists(os.path.join(target, self.marker)):
                raise OutputDirError(f"{named} is a non-empty directory that holds no {self.kind} (no {self.marker}): "
                                     f"choose a new or empty directory")
            if not overwrite:
                how = (f"pass {self.overwrite_flag} to replace it, or choose another directory" if self.overwrite_flag
                       else "choose another directory, or remove it first")
                raise OutputDirError(f"{named} already holds a {self.kind}: {how}")
        parent = os.path.dirname(target)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as error:
            raise OutputDirError(f"cannot create the directory of {named}: {describe_os_error(error)}") from None
        if not os.access(parent, os.W_OK):
            raise OutputDirError(f"cannot write {named}: {parent} is not writable")
        return target

    @property
    def staging(self) -> str:
        """Where `staged` writes the output before it is renamed into place."""
        return f"{os.path.abspath(self.path)}.tmp-{os.getpid()}"

    @contextlib.contextmanager
    def staged(self, overwrite: bool, kept_on_failure: tuple[str, ...] = ()) -> Iterator[str]:
        """Check the target, yield a path beside it for the writer to create and fill; when the block ends
        normally that directory replaces the target, otherwise it is removed but for the files
        `kept_on_failure` (names in it: a failed run's diagnostics, which its messages name there)."""
        target = self.check(overwrite)
        tmp = self.staging
        shutil.rmtree(tmp, ignore_errors=True)
        written = False
        try:
            yield tmp
            written = True
            self.check(overwrite)  # again: another run may have put an output there meanwhile
            replace_dir(target, tmp, aside=f"{target}.old-{os.getpid()}")
        except OSError as error:
            raise OutputDirError(f"{self.flag} {self.path} not written: {describe_os_error(error)}") from None
        finally:
            if written or not _prune_to(tmp, kept_on_failure):  # a failed write keeps its diagnostics
                shutil.rmtree(tmp, ignore_errors=True)


def _prune_to(directory: str, kept: tuple[str, ...]) -> bool:
    """Remove everything in `directory` but the entries named `kept`, as far as it can (the error being
    reported is the write's); whether any of them is left."""
    try:
        if not kept or not os.path.isdir(directory):
            return False
        for name in os.listdir(directory):
            if name not in kept:
                path = os.path.join(directory, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.remove(path)
        return any(name in kept for name in os.listdir(directory))
    except OSError:
        return True  # left as it is: nothing more is lost

