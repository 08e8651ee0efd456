"""Saving and restoring with every rank together: each step of the protocol ends in an agreement.

Each agreement is `ProcessGroup.agree` over every rank's problem (disk full, a missing piece, ...): if
one rank failed, every rank stops (`CheckpointError` naming the file on the lowest failing rank,
`PeerRankFailed` on the others), instead of the others waiting in a collective.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from typing import Any, Callable, List, Mapping, NoReturn, Optional, Sequence, Tuple

import numpy as np

from dlrm.atomic import describe_os_error, write_text_atomically
from dlrm.dist import Failure, ProcessGroup
from dlrm.embedding.base import TablePiece
from dlrm.errors import PeerRankFailed
from dlrm.train.checkpoint.directory import (
    META,
    WRITING,
    CheckpointDirLock,
    enough_space,
    find_checkpoint,
    make_tmp_dir,
    publish,
    read_meta,
    writable,
)
from dlrm.train.checkpoint.files import (
    CheckpointError,
    FileEntries,
    PieceSlots,
    check_key,
    check_pieces,
    read_region,
    restore_variable,
    save_array,
    saved_pieces,
    step_dir_name,
    table_dir_name,
    write_pieces,
)
from dlrm.train.checkpoint.model_shape import saved_model_shape, shape_mismatch
from dlrm.train.checkpoint.verify import MANIFEST, check_share, manifest_text, text_entry

# Format 3 lists its files in a manifest (`verify`); format 2 keys tables by name (`embedding/<name>/`); format 1
# by position (`embedding/t<i>/`). All three are read.
FORMAT_VERSION = 3
READABLE_FORMATS = (1, 2, 3)


def _attempt(action: Callable[[], None], what: str) -> Optional[str]:
    """Run `action`; a failed file operation becomes a message (every rank must reach the next agreement)."""
    try:
        action()
    except OSError as error:
        return f"{what}: {describe_os_error(error)}"
    return None


def raise_agreed(group: ProcessGroup, problem: Optional[str], on_failure: Callable[[], str] = lambda: "") -> None:
    """Every rank learns whether any rank hit a problem; if so all run `on_failure` and stop together
    (`raise_failures`)."""
    failures = group.agree(problem, name="checkpoint_agree")
    if failures:
        raise_failures(group, failures, on_failure())


def raise_failures(group: ProcessGroup, failures: Sequence[Failure], note: str = "") -> NoReturn:
    """Stop every rank after an agreement that found `failures` (the same list on every rank).

    The lowest failing rank raises CheckpointError with its message (and its host when there are
    several ranks; the entry point names the rank) followed by `note`; the other ranks raise
    PeerRankFailed, so the user reads one message.
    """
    first = failures[0]
    if group.rank != first.rank:
        raise PeerRankFailed(first.rank)
    if group.size == 1:
        raise CheckpointError(first.message + note)
    others = [str(failure.rank) for failure in failures[1:]]
    also = f" (also on rank{'s' if len(others) > 1 else ''} {', '.join(others)})" if others else ""
    error = CheckpointError(f"{first.message}{also}{note} (host {first.host})")
    error.on_every_rank = False  # only this rank reports it (the entry point names the rank)
    raise error


def verify_checkpoint(checkpoint_dir: str, group: ProcessGroup) -> List[Failure]:
    """Every rank checks its share of the checkpoint's files (`verify`); every rank gets the failures."""
    problem = None
    try:
        check_share(checkpoint_dir, group.rank, group.size)
    except CheckpointError as error:
        problem = str(error)
    except (OSError, ValueError, KeyError, TypeError) as error:  # e.g. a hand-made manifest: still agree
        problem = f"checkpoint {checkpoint_dir} cannot be verified: {error}"
    return group.agree(problem, name="checkpoint_verify")


def _write_dense_and_meta(tmp: str, step: int, dense: Mapping[str, Any], meta: Mapping,
                          table_names: Sequence[str]) -> FileEntries:
    entries, dense_shapes = {}, {}
    for key, variable in dense.items():
        check_key(key, "dense key")
        array = np.asarray(variable.numpy())
        dense_shapes[key] = list(array.shape)
        relative = os.path.join("dense", f"{key}.npy")
        entries[relative] = save_array(os.path.join(tmp, relative), array)
    full_meta = dict(meta)
    full_meta.update(format_version=FORMAT_VERSION, step=int(step), dense_shapes=dense_shapes,
                     table_names=list(table_names))
    text = json.dumps(full_meta, indent=1, sort_keys=True)
    write_text_atomically(os.path.join(tmp, META), text)
    entries[META] = text_entry(text)
    return entries


def _write_manifest(tmp: str, every_rank_entries: Sequence[FileEntries]) -> None:
    files: FileEntries = {}
    for entries in every_rank_entries:
        files.update(entries)
    write_text_atomically(os.path.join(tmp, MANIFEST), manifest_text(files))


def save_checkpoint(
    root: str,
    step: int,
    dense: Mapping[str, Any],
    stored_pieces: Sequence[PieceSlots],
    meta: Mapping,
    keep: int = 3,
    *,
    group: ProcessGroup,
    table_names: Sequence[str],
) -> str:
    """Write checkpoint `step` under `root` with the protocol of the package docstring; returns its directory.

    `dense` maps a stable key to each data-parallel variable or slot (written by rank 0);
    `stored_pieces` are the embedding pieces this rank writes (piece.table indexes `table_names`, the
    tables' names: their directories); `meta` is JSON-serialisable run state.
    Every rank must call this with the same `root` and `step`. A failed write (disk full, read-only,
    ...) on any rank raises on every rank, removes `step_X.tmp` and leaves `latest` and the previous
    checkpoints as they were. Rank 0 writes the manifest of every rank's files last (`verify`).
    """
    check_pieces(stored_pieces)
    final = os.path.join(root, step_dir_name(step))
    tmp = final + WRITING
    what = f"cannot write checkpoint {final}"
    primary = group.rank == 0

    def remove_tmp() -> str:
        if primary:
            shutil.rmtree(tmp, ignore_errors=True)
        return f"; the partial {tmp} is removed, the last complete checkpoint is {find_checkpoint(root) or 'none'}"

    raise_agreed(group, _attempt(lambda: make_tmp_dir(root, tmp), what) if primary else None, remove_tmp)
    entries: FileEntries = {}
    problem = _attempt(lambda: entries.update(write_pieces(tmp, stored_pieces, table_names)), what)
    if primary and problem is None:
        problem = _attempt(lambda: entries.update(_write_dense_and_meta(tmp, step, dense, meta, table_names)), what)
    raise_agreed(group, problem, remove_tmp)  # every rank's pieces are on disk
    every_rank_entries = group.allgather_object(entries, name="checkpoint_manifest")

    def write_manifest_and_publish() -> None:
        _write_manifest(tmp, every_rank_entries)
        publish(root, tmp, final, step, keep)

    raise_agreed(group, _attempt(write_manifest_and_publish, what) if primary else None, remove_tmp)
    return final


def prepare_checkpoint_dir(root: str, expected_bytes: int, group: ProcessGroup) -> CheckpointDirLock:
    """Check the checkpoint directory before training, on every rank, and lock it for this run.

    Every rank writes checkpoint files, so every rank checks that it can write to `root` and that it has
    room for one whole checkpoint (the sum of every rank's `expected_bytes`, see `checkpoint_bytes`:
    ranks share the directory). Rank 0 then takes `<root>/lock` for the run, so a second run on the same
    directory stops here instead of corrupting this one's saves. The ranks agree on the outcome: all of
    them stop with one CheckpointError (naming the rank and the path) if any check failed anywhere.
    Use the returned lock as a context manager around the run (other ranks get one that holds nothing).
    """
    needed = sum(group.allgather_object(int(expected_bytes), name="checkpoint_bytes"))
    lock = CheckpointDirLock(root)
    problem = writable(root) or enough_space(root, needed)
    if problem is None and group.rank == 0:
        problem = lock.acquire()

    def unlock() -> str:
        lock.release()
        return ""

    raise_agreed(group, problem, unlock)
    return lock


def _saved_table_dirs(directory: str, meta: Mapping) -> List[Tuple[str, str]]:
    """(table name, its directory) of every table a checkpoint saved (format 1: named `t<i>`)."""
    if meta.get("format_version") == 1:
        found = [name for name in os.listdir(os.path.join(directory, "embedding")) if re.fullmatch(r"t\d+", name)]
        return [(name, os.path.join(directory, "embedding", name)) for name in sorted(found, key=lambda n: int(n[1:]))]
    return [(name, os.path.join(directory, "embedding", table_dir_name(name))) for name in meta["table_names"]]


def read_arrays(path: str) -> dict:
    """Every array of a checkpoint, whole tables assembled from their pieces (any world size).

    Keys: `dense/<key>`, `embedding/<table name>/<slot>` (`value` = the weights; format 1: tables named
    `t<i>`). Loads whole tables into memory: meant for inspection, export and tests on models that fit
    one host, not for the t0 model.
    """
    directory = find_checkpoint(path)
    if directory is None:
        raise CheckpointError(f"no complete checkpoint at {path}")
    check_share(directory, 0, 1)
    meta = read_meta(directory)
    arrays = {f"dense/{key}": np.load(os.path.join(directory, "dense", f"{key}.npy"), allow_pickle=False)
              for key in meta["dense_shapes"]}
    for table, (name, table_dir) in enumerate(_saved_table_dirs(directory, meta)):
        for slot in sorted(os.listdir(table_dir)):
            saved = saved_pieces(table_dir, table, slot)
            whole = TablePiece(table, 0, max(p.row_end for p, _ in saved), 0, max(p.col_end for p, _ in saved))
            arrays[f"embedding/{name}/{slot}"] = read_region(saved, whole)
    return arrays


def check_compatible(meta: Mapping, model_shape: Mapping, checkpoint_dir: str) -> None:
    """Refuse a checkpoint whose model shape (tables by name, numerical features, dense sizes) differs from ours."""
    problem = shape_mismatch(saved_model_shape(meta, [t["name"] for t in model_shape.get("tables", [])]),
                             model_shape)
    if problem:
        raise CheckpointError(f"checkpoint {checkpoint_dir} was written for a different model: {problem}; use a "
                              f"matching configuration or another checkpoint")


def restore_checkpoint(
    checkpoint_dir: str,
    dense: Mapping[str, Any],
    held_pieces: Sequence[PieceSlots],
    model_shape: Optional[Mapping] = None,
    strict: bool = True,
    *,
    group: ProcessGroup,
    table_names: Sequence[str],
    verified: bool = False,
) -> dict:
    """Verify `checkpoint_dir` (unless `verified`: done by the caller), then fill `dense` variables and every
    held piece's slots from it; returns its meta.

    Pieces are found by their table's name (`table_names[piece.table]`); in a format-1 checkpoint by
    position (table i of `table_names` is its `t<i>`).

    With `strict=False` the checkpoint may hold more than asked for (evaluation restores weights only,
    not optimizer slots); anything asked for must be there either way. Each rank reads its own pieces,
    so the outcome is agreed (`raise_agreed`): a piece missing on one rank stops every rank with one message.
    """
    if not verified:
        failures = verify_checkpoint(checkpoint_dir, group)
        if failures:
            raise_failures(group, failures)
    meta, problem = {}, None
    try:
        meta = _restore(checkpoint_dir, dense, held_pieces, model_shape, strict, table_names)
    except (CheckpointError, OSError, ValueError) as error:
        problem = str(error)
    raise_agreed(group, problem)
    return meta


def _restore(checkpoint_dir: str, dense: Mapping[str, Any], held_pieces: Sequence[PieceSlots],
             model_shape: Optional[Mapping], strict: bool, table_names: Sequence[str]) -> dict:
    meta = read_meta(checkpoint_dir)
    if meta.get("format_version") not in READABLE_FORMATS:
        raise CheckpointError(f"{checkpoint_dir}: unsupported checkpoint format {meta.get('format_version')!r}")
    if model_shape is not None:
        check_compatible(meta, model_shape, checkpoint_dir)
    _restore_dense(checkpoint_dir, meta["dense_shapes"], dense, strict)
    for piece, slots in held_pieces:
        table_dir = _held_table_dir(checkpoint_dir, meta, table_names, piece.table)
        for slot, variable in slots.items():
            saved = saved_pieces(table_dir, piece.table, slot)
            if not saved:
                raise CheckpointError(f"checkpoint {checkpoint_dir} has no slot {slot!r} for table "
                                      f"{table_names[piece.table]!r} (written with another optimizer?)")
            restore_variable(variable, saved, piece)
    return meta


def _held_table_dir(checkpoint_dir: str, meta: Mapping, table_names: Sequence[str], table: int) -> str:
    """The directory of this model's table `table` in the checkpoint: by name, or by position in format 1."""
    name = table_names[table]
    found = os.path.join(checkpoint_dir, "embedding", f"t{table}" if meta.get("format_version") == 1
                         else table_dir_name(name))
    if not os.path.isdir(found):
        saved = [saved_name for saved_name, _ in _saved_table_dirs(checkpoint_dir, meta)]
        raise CheckpointError(f"checkpoint {checkpoint_dir} has no table {name!r} (its tables: {saved})")
    return found


def _restore_dense(checkpoint_dir: str, saved_dense: Mapping[str, list], dense: Mapping[str, Any],
                   strict: bool) -> None:
    missing = sorted(set(dense) - set(saved_dense))
    extra = sorted(set(saved_dense) - set(dense))
    if missing or (extra and strict):
        raise CheckpointError(f"checkpoint {checkpoint_dir} has different dense variables: missing here "
                              f"{extra[:5]}, missing there {missing[:5]} (different model or optimizer?)")
    for key, variable in dense.items():
        shape = list(variable.shape)
        if shape != list(saved_dense[key]):
            raise CheckpointError(f"checkpoint {checkpoint_dir}: dense variable {key!r} has shape "
                                  f"{saved_dense[key]} there and {shape} here")
    for key, variable in dense.items():
        variable.assign(np.load(os.path.join(checkpoint_dir, "dense", f"{key}.npy"),
                                allow_pickle=False))
