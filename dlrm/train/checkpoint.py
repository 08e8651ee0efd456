"""Sharded, atomic checkpoints that any world size can restore (layout: docs/contracts.md).

```
<root>/latest                                   name of the last complete checkpoint
<root>/step_00000100/meta.json                  step, world size, reader position, shapes, config
<root>/step_00000100/dense/<key>.npy            data-parallel variables and their slots (rank 0)
<root>/step_00000100/embedding/t<table>/<slot>/r<row0>-<row1>_c<col0>-<col1>.npy
```

Protocol: rank 0 clears a stale `step_X.tmp` and creates it; the ranks agree; every rank writes its
pieces (rank 0 also the dense variables and meta.json); the ranks agree; rank 0 fsyncs, renames the
directory to `step_X`, then replaces `latest` (temp file + rename) and prunes old checkpoints. A
directory named `step_X` therefore only exists complete, and a kill at any moment leaves the previous
checkpoint loadable. `latest` that is empty, garbled or points nowhere is ignored in favour of the
newest complete directory. Each "agree" is an all-gather of every rank's write error (disk full, ...):
if one rank failed, rank 0 removes `step_X.tmp` and every rank stops (`CheckpointError` naming the file
on the failing rank, `PeerRankFailed` on the others), instead of the others waiting in a barrier.

A run holds `<root>/lock` (see `prepare_checkpoint_dir`) so two runs never write one directory.

Restore fills each *held* piece from the saved pieces that overlap it, so a checkpoint written by one
plan / world size restores into another. Only .npy files (loaded with `allow_pickle=False`) and JSON.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from dlrm.atomic import describe_os_error, fsync_dir, naming_file, write_text_atomically
from dlrm.embedding.base import TablePiece
from dlrm.embedding.planner import format_bytes
from dlrm.errors import PeerRankFailed, UserError

LATEST = "latest"
META = "meta.json"
LOCK = "lock"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d{8})$")
_PIECE_FILE = re.compile(r"^r(\d+)-(\d+)_c(\d+)-(\d+)\.npy$")
_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_CHUNK_ROWS = 1 << 20  # rows copied out of or into a variable at a time (bounds host memory for big tables)

# A piece with its variables: {"value": weights, "<slot name>": optimizer slot of the same shape}.
PieceSlots = Tuple[TablePiece, Mapping[str, "object"]]


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used (missing, incomplete, for a different model) or written (path)."""

    on_every_rank = True  # raised alike on every rank (or agreed first, see `_agree`): rank 0 reports


def _gather_alone(obj) -> list:
    return [obj]


@dataclass(frozen=True)
class Collectives:
    """Who this process is and how it waits for / hears from the others (dlrm.dist in real runs).

    `gather(obj)` returns every rank's JSON-like `obj` in rank order, on every rank.
    """

    rank: int
    barrier: Callable[[], None]
    gather: Callable[[object], list] = _gather_alone

    @staticmethod
    def from_dist() -> "Collectives":
        from dlrm import dist

        return Collectives(rank=dist.rank(), barrier=dist.barrier, gather=dist.allgather_object)


SINGLE_PROCESS = Collectives(rank=0, barrier=lambda: None)


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def piece_file_name(piece: TablePiece) -> str:
    return f"r{piece.row_start}-{piece.row_end}_c{piece.col_start}-{piece.col_end}.npy"


# ----------------------------------------------------------------------------------------------- save

def _write_npy(path: str, shape: Tuple[int, ...], dtype, chunks: Iterable[np.ndarray]) -> None:
    """Write an .npy file from consecutive row chunks with plain `write` calls, then fsync it.

    Not `np.save` (a full disk gives "OSError: N requested and M written", no errno, no file name) and not
    a memory map (a full disk kills the process with SIGBUS): here it is OSError(ENOSPC) naming `path`.
    """
    try:
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                     "fortran_order": False, "shape": tuple(shape)})
            for chunk in chunks:
                f.write(np.ascontiguousarray(chunk, dtype=dtype).reshape(-1).view(np.uint8))
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        raise naming_file(error, path) from error


def _save_array(path: str, array: np.ndarray) -> None:
    _write_npy(path, array.shape, array.dtype, [array])


def _save_variable(path: str, variable) -> None:
    """Write a (possibly large) 2-D variable in row chunks so the host never holds two copies."""
    shape = tuple(variable.shape)
    if len(shape) != 2 or shape[0] <= _CHUNK_ROWS:
        _save_array(path, np.asarray(variable.numpy()))
        return
    chunks = (variable[start:start + _CHUNK_ROWS].numpy() for start in range(0, shape[0], _CHUNK_ROWS))
    _write_npy(path, shape, variable.dtype.as_numpy_dtype, chunks)


def _check_key(key: str, what: str) -> None:
    if not _KEY.match(key):
        raise ValueError(f"{what} {key!r} is not a safe file name (letters, digits, '_', '.', '-')")


def _attempt(action: Callable[[], None], what: str) -> Optional[str]:
    """Run `action`; a failed file operation becomes a message (every rank must reach the next agreement)."""
    try:
        action()
    except OSError as error:
        return f"{what}: {describe_os_error(error)}"
    return None


def _agree(comm: Collectives, problem: Optional[str], on_failure: Callable[[], str] = lambda: "") -> None:
    """Every rank learns whether any rank hit a problem; if so all run `on_failure` and stop together.

    The lowest failing rank raises CheckpointError with its message (and its host when there are
    several ranks; the entry point names the rank) followed by what `on_failure` returned; the other
    ranks raise PeerRankFailed, so the user reads one message.
    """
    reports = comm.gather(None if problem is None else {"host": socket.gethostname(), "message": problem})
    failed = [rank for rank, report in enumerate(reports) if report]
    if not failed:
        return
    note = on_failure()
    first = failed[0]
    if comm.rank != first:
        raise PeerRankFailed(first)
    if len(reports) == 1:
        raise CheckpointError(problem + note)
    also = f" (also on rank{'s' if len(failed) > 2 else ''} {', '.join(map(str, failed[1:]))})" \
        if len(failed) > 1 else ""
    error = CheckpointError(f"{problem}{also}{note} (host {reports[first]['host']})")
    error.on_every_rank = False  # only this rank reports it (the entry point names the rank)
    raise error


def _make_tmp_dir(root: str, tmp: str) -> None:
    os.makedirs(root, exist_ok=True)
    if os.path.exists(tmp):
        shutil.rmtree(tmp)  # left over by a killed run: never complete, never loaded
    os.makedirs(os.path.join(tmp, "dense"))
    os.makedirs(os.path.join(tmp, "embedding"))


def _write_pieces(tmp: str, stored_pieces: Sequence[PieceSlots]) -> None:
    for piece, slots in stored_pieces:
        directory = os.path.join(tmp, "embedding", f"t{piece.table}")
        for slot, variable in slots.items():
            os.makedirs(os.path.join(directory, slot), exist_ok=True)
            _save_variable(os.path.join(directory, slot, piece_file_name(piece)), variable)


def _check_pieces(stored_pieces: Sequence[PieceSlots]) -> None:
    for piece, slots in stored_pieces:
        if "value" not in slots:
            raise ValueError(f"piece {piece} has no 'value' variable")
        for slot, variable in slots.items():
            _check_key(slot, "slot name")
            if tuple(variable.shape) != piece.shape:
                raise ValueError(f"piece {piece} slot {slot!r}: variable shape {tuple(variable.shape)} "
                                 f"!= piece shape {piece.shape}")


def _write_dense_and_meta(tmp: str, step: int, dense: Mapping[str, "object"], meta: Mapping) -> None:
    dense_shapes = {}
    for key, variable in dense.items():
        _check_key(key, "dense key")
        array = np.asarray(variable.numpy())
        dense_shapes[key] = list(array.shape)
        _save_array(os.path.join(tmp, "dense", f"{key}.npy"), array)
    full_meta = dict(meta)
    full_meta.update(format_version=FORMAT_VERSION, step=int(step), dense_shapes=dense_shapes)
    write_text_atomically(os.path.join(tmp, META), json.dumps(full_meta, indent=1, sort_keys=True))


def _publish(root: str, tmp: str, final: str, step: int, keep: int) -> None:
    """Make the complete `tmp` the checkpoint `final` and point `latest` at it."""
    for directory, _, _ in os.walk(tmp):
        fsync_dir(directory)
    if os.path.exists(final):  # same step written again (e.g. a rerun): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(root)
    write_text_atomically(os.path.join(root, LATEST), step_dir_name(step) + "\n")
    _prune(root, keep, protect=step_dir_name(step))


def save_checkpoint(
    root: str,
    step: int,
    dense: Mapping[str, "object"],
    stored_pieces: Sequence[PieceSlots],
    meta: Mapping,
    keep: int = 3,
    comm: Optional[Collectives] = None,
) -> str:
    """Write checkpoint `step` under `root` with the protocol above; returns its directory.

    `dense` maps a stable key to each data-parallel variable or slot (written by rank 0);
    `stored_pieces` are the embedding pieces this rank writes; `meta` is JSON-serialisable run state.
    Every rank must call this with the same `root` and `step`. A failed write (disk full, read-only,
    ...) on any rank raises on every rank, removes `step_X.tmp` and leaves `latest` and the previous
    checkpoints as they were.
    """
    comm = comm or Collectives.from_dist()
    _check_pieces(stored_pieces)
    final = os.path.join(root, step_dir_name(step))
    tmp = final + ".tmp"
    what = f"cannot write checkpoint {final}"

    def remove_tmp() -> str:
        if comm.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        return f"; the partial {tmp} is removed, the last complete checkpoint is {find_checkpoint(root) or 'none'}"

    _agree(comm, _attempt(lambda: _make_tmp_dir(root, tmp), what) if comm.rank == 0 else None, remove_tmp)
    problem = _attempt(lambda: _write_pieces(tmp, stored_pieces), what)
    if comm.rank == 0 and problem is None:
        problem = _attempt(lambda: _write_dense_and_meta(tmp, step, dense, meta), what)
    _agree(comm, problem, remove_tmp)  # every rank's pieces are on disk
    _agree(comm, _attempt(lambda: _publish(root, tmp, final, step, keep), what) if comm.rank == 0 else None,
           remove_tmp)
    return final


# -------------------------------------------------------------------------------------------- start-up

FILE_OVERHEAD_BYTES = 128 + 4096  # per .npy file: its header, and rounding up to a filesystem block
META_BYTES = 1 << 16  # meta.json (config and plan) and `latest`, an upper bound


def checkpoint_bytes(dense: Mapping[str, "object"], stored_pieces: Sequence[PieceSlots], rank: int) -> int:
    """Disk bytes this rank adds to one checkpoint (rank 0 also writes `dense` and meta.json).

    The sum over ranks is what a save needs free: pieces, optimizer slots and dense variables, plus
    per-file overhead.
    """
    variables = [variable for _, slots in stored_pieces for variable in slots.values()]
    if rank == 0:
        variables += list(dense.values())
    data = sum(int(np.prod(tuple(v.shape), dtype=np.int64)) * np.dtype(_numpy_dtype(v)).itemsize
               for v in variables)
    return data + FILE_OVERHEAD_BYTES * len(variables) + (META_BYTES if rank == 0 else 0)


def _numpy_dtype(variable):
    dtype = variable.dtype
    return getattr(dtype, "as_numpy_dtype", dtype)  # tf.Variable or np.ndarray


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


def _writable(root: str) -> Optional[str]:
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


def _enough_space(root: str, needed: int) -> Optional[str]:
    stats = os.statvfs(root)
    free = stats.f_bavail * stats.f_frsize
    if free >= needed:
        return None
    return (f"not enough free space for checkpoints in {root} (--save_checkpoint_path): one checkpoint of this "
            f"model needs about {format_bytes(needed, round_up=True)} ({needed} bytes: weights, optimizer slots and dense variables), "
            f"{format_bytes(free)} are free")


def prepare_checkpoint_dir(root: str, expected_bytes: int, comm: Optional[Collectives] = None) -> CheckpointDirLock:
    """Check the checkpoint directory before training, on every rank, and lock it for this run.

    Every rank writes checkpoint files, so every rank checks that it can write to `root` and that it has
    room for one whole checkpoint (the sum of every rank's `expected_bytes`, see `checkpoint_bytes`:
    ranks share the directory). Rank 0 then takes `<root>/lock` for the run, so a second run on the same
    directory stops here instead of corrupting this one's saves. The ranks agree on the outcome: all of
    them stop with one CheckpointError (naming the rank and the path) if any check failed anywhere.
    Use the returned lock as a context manager around the run (other ranks get one that holds nothing).
    """
    comm = comm or Collectives.from_dist()
    needed = sum(comm.gather(int(expected_bytes)))
    lock = CheckpointDirLock(root)
    problem = _writable(root) or _enough_space(root, needed)
    if problem is None and comm.rank == 0:
        problem = lock.acquire()

    def unlock() -> str:
        lock.release()
        return ""

    _agree(comm, problem, unlock)
    return lock


def complete_checkpoints(root: str) -> List[str]:
    """Names of complete checkpoint directories under `root`, oldest first."""
    if not os.path.isdir(root):
        return []
    names = [name for name in os.listdir(root)
             if _STEP_DIR.match(name) and os.path.isfile(os.path.join(root, name, META))]
    return sorted(names)


def _prune(root: str, keep: int, protect: str) -> None:
    names = complete_checkpoints(root)
    for name in names[:max(0, len(names) - keep)]:
        if name != protect:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


# -------------------------------------------------------------------------------------------- restore

def find_checkpoint(path: str) -> Optional[str]:
    """A complete checkpoint directory for `path` (itself, or `latest` / the newest under a root)."""
    if os.path.isfile(os.path.join(path, META)) and not path.rstrip("/").endswith(".tmp"):
        return path
    latest_file = os.path.join(path, LATEST)
    if os.path.isfile(latest_file):
        with open(latest_file) as f:
            name = f.read().strip()
        if _STEP_DIR.match(name) and os.path.isfile(os.path.join(path, name, META)):
            return os.path.join(path, name)
    names = complete_checkpoints(path)  # `latest` missing or unusable: newest complete directory
    return os.path.join(path, names[-1]) if names else None


def read_meta(checkpoint_dir: str) -> dict:
    with open(os.path.join(checkpoint_dir, META)) as f:
        return json.load(f)


def saved_pieces(checkpoint_dir: str, table: int, slot: str) -> List[Tuple[TablePiece, str]]:
    """(piece, file) of every saved piece of `table`'s `slot` (feed them to `read_region`)."""
    directory = os.path.join(checkpoint_dir, "embedding", f"t{table}", slot)
    if not os.path.isdir(directory):
        return []
    pieces = []
    for name in sorted(os.listdir(directory)):
        match = _PIECE_FILE.match(name)
        if match:
            r0, r1, c0, c1 = (int(g) for g in match.groups())
            pieces.append((TablePiece(table, r0, r1, c0, c1), os.path.join(directory, name)))
    return pieces


def read_region(saved: Iterable[Tuple[TablePiece, str]], wanted: TablePiece) -> np.ndarray:
    """Assemble the rectangle `wanted` from saved piece files that together cover it.

    Files are memory-mapped, so only the overlapping rows are read. Raises if any cell is uncovered.
    """
    out = None
    covered = 0
    for piece, path in saved:
        r0, r1 = max(piece.row_start, wanted.row_start), min(piece.row_end, wanted.row_end)
        c0, c1 = max(piece.col_start, wanted.col_start), min(piece.col_end, wanted.col_end)
        if r0 >= r1 or c0 >= c1:
            continue
        try:
            source = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as error:  # object arrays (pickles) and malformed headers
            raise CheckpointError(f"{path}: not a plain numeric .npy array ({error})") from None
        if source.shape != piece.shape:
            raise CheckpointError(f"{path}: array shape {source.shape} does not match its name {piece.shape}")
        if out is None:
            out = np.empty(wanted.shape, dtype=source.dtype)
        out[r0 - wanted.row_start:r1 - wanted.row_start, c0 - wanted.col_start:c1 - wanted.col_start] = \
            source[r0 - piece.row_start:r1 - piece.row_start, c0 - piece.col_start:c1 - piece.col_start]
        covered += (r1 - r0) * (c1 - c0)
    needed = wanted.shape[0] * wanted.shape[1]
    if covered != needed:
        raise CheckpointError(f"saved pieces cover {covered} of the {needed} cells of {wanted} "
                              f"(checkpoint incomplete or pieces overlap)")
    return out


def read_arrays(path: str) -> dict:
    """Every array of a checkpoint, whole tables assembled from their pieces (any world size).

    Keys: `dense/<key>`, `t<table>/<slot>` (`value` = the weights). Loads whole tables into memory:
    meant for inspection, export and tests on models that fit one host, not for the t0 model.
    """
    directory = find_checkpoint(path)
    if directory is None:
        raise CheckpointError(f"no complete checkpoint at {path}")
    meta = read_meta(directory)
    arrays = {f"dense/{key}": np.load(os.path.join(directory, "dense", f"{key}.npy"), allow_pickle=False)
              for key in meta["dense_shapes"]}
    dim = int(meta["model_shape"]["embedding_dim"])
    for table, rows in enumerate(meta["model_shape"]["table_sizes"]):
        for slot in sorted(os.listdir(os.path.join(directory, "embedding", f"t{table}"))):
            arrays[f"t{table}/{slot}"] = read_region(saved_pieces(directory, table, slot),
                                                     TablePiece(table, 0, int(rows), 0, dim))
    return arrays


def check_compatible(meta: Mapping, model_shape: Mapping, checkpoint_dir: str) -> None:
    """Refuse a checkpoint whose model shape (tables, dim, dense shapes) differs from ours."""
    saved = meta.get("model_shape")
    for key, ours in model_shape.items():
        theirs = None if saved is None else saved.get(key)
        if theirs != ours:
            raise CheckpointError(
                f"checkpoint {checkpoint_dir} was written for a different model: {key} is {theirs!r} there "
                f"and {ours!r} here; use a matching configuration or another checkpoint")


def restore_checkpoint(
    checkpoint_dir: str,
    dense: Mapping[str, "object"],
    held_pieces: Sequence[PieceSlots],
    model_shape: Optional[Mapping] = None,
    strict: bool = True,
    comm: Optional[Collectives] = None,
) -> dict:
    """Fill `dense` variables and every held piece's slots from `checkpoint_dir`; returns its meta.

    With `strict=False` the checkpoint may hold more than asked for (evaluation restores weights only,
    not optimizer slots); anything asked for must be there either way. Each rank reads its own pieces,
    so the outcome is agreed (`_agree`): a piece missing on one rank stops every rank with one message.
    """
    comm = comm or SINGLE_PROCESS
    meta, problem = None, None
    try:
        meta = _restore(checkpoint_dir, dense, held_pieces, model_shape, strict)
    except (CheckpointError, OSError, ValueError) as error:
        problem = str(error)
    _agree(comm, problem)
    return meta


def _restore(checkpoint_dir: str, dense: Mapping[str, "object"], held_pieces: Sequence[PieceSlots],
             model_shape: Optional[Mapping], strict: bool) -> dict:
    meta = read_meta(checkpoint_dir)
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{checkpoint_dir}: unsupported checkpoint format {meta.get('format_version')!r}")
    if model_shape is not None:
        check_compatible(meta, model_shape, checkpoint_dir)
    saved_dense = meta["dense_shapes"]
    missing = sorted(set(dense) - set(saved_dense))
    extra = sorted(set(saved_dense) - set(dense))
    if missing or (extra and strict):
        raise CheckpointError(f"checkpoint {checkpoint_dir} has different dense variables: missing here "
                              f"{extra[:5]}, missing there {missing[:5]} (different model or optimizer?)")
    for key, variable in dense.items():
        if list(variable.shape) != list(saved_dense[key]):
            raise CheckpointError(f"checkpoint {checkpoint_dir}: dense variable {key!r} has shape "
                                  f"{saved_dense[key]} there and {list(variable.shape)} here")
    for key, variable in dense.items():
        variable.assign(np.load(os.path.join(checkpoint_dir, "dense", f"{key}.npy"), allow_pickle=False))

    for piece, slots in held_pieces:
        for slot, variable in slots.items():
            saved = saved_pieces(checkpoint_dir, piece.table, slot)
            if not saved:
                raise CheckpointError(f"checkpoint {checkpoint_dir} has no slot {slot!r} for table {piece.table} "
                                      f"(written with another optimizer?)")
            _restore_variable(variable, saved, piece)
    return meta


def _restore_variable(variable, saved: List[Tuple[TablePiece, str]], piece: TablePiece) -> None:
    """Fill a piece's variable from the saved files in row chunks, so the host never holds a whole
    copy of a big table piece (the mirror of `_save_variable`)."""
    rows = piece.shape[0]
    if rows <= _CHUNK_ROWS:
        variable.assign(read_region(saved, piece))
        return
    for start in range(0, rows, _CHUNK_ROWS):
        stop = min(rows, start + _CHUNK_ROWS)
        chunk = replace(piece, row_start=piece.row_start + start, row_end=piece.row_start + stop)
        variable[start:stop].assign(read_region(saved, chunk))
