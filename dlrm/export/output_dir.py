"""The export's output directory: refused if it exists (unless overwriting), written under a temporary
name and renamed into place complete, so a reader never sees half a SavedModel."""
from __future__ import annotations

import contextlib
import os
import shutil
from typing import Iterator

from dlrm.atomic import describe_os_error, fsync_dir
from dlrm.export.errors import ExportError


def check_target(out: str, overwrite: bool) -> str:
    """`out` as an absolute path; raises ExportError if it exists and may not be replaced, or cannot be made."""
    path = os.path.abspath(out)
    if os.path.lexists(path) and not overwrite:
        raise ExportError(f"output directory {out} exists: pass --overwrite to replace it, or choose another path")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ExportError(f"output {out} exists and is not a directory")
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as error:
        raise ExportError(f"cannot create the output's parent directory: {describe_os_error(error)}") from None
    if not os.access(parent, os.W_OK):
        raise ExportError(f"cannot write the output directory {out}: {parent} is not writable")
    return path


@contextlib.contextmanager
def staged(out: str, overwrite: bool) -> Iterator[str]:
    """Yield a temporary directory next to `out`; on success it replaces `out`, on failure it is removed."""
    path = check_target(out, overwrite)
    tmp = f"{path}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        yield tmp
        old = f"{path}.old-{os.getpid()}"
        if os.path.lexists(path):
            os.rename(path, old)
        os.rename(tmp, path)
        fsync_dir(os.path.dirname(path))
        shutil.rmtree(old, ignore_errors=True)
    except OSError as error:
        raise ExportError(f"cannot write {out}: {describe_os_error(error)}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
