"""Sharded, atomic checkpoints that any world size can restore (layout: docs/contracts.md).

```
<root>/latest                                   name of the last complete checkpoint
<root>/step_00000100/meta.json                  step, world size, reader position, shapes, config
<root>/step_00000100/dense/<key>.npy            data-parallel variables and their slots (rank 0)
<root>/step_00000100/embedding/t<table>/<slot>/r<row0>-<row1>_c<col0>-<col1>.npy
```

Protocol: rank 0 clears a stale `step_X.tmp` and creates it; barrier; every rank writes its pieces;
barrier; rank 0 writes meta.json, fsyncs, renames the directory to `step_X`, then replaces `latest`
(temp file + rename) and prunes old checkpoints. A directory named `step_X` therefore only exists
complete, and a kill at any moment leaves the previous checkpoint loadable. `latest` that is empty,
garbled or points nowhere is ignored in favour of the newest complete directory.

Restore fills each *held* piece from the saved pieces that overlap it, so a checkpoint written by one
plan / world size restores into another. Only `np.save` / `np.load(allow_pickle=False)` and JSON.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, replace
from typing import Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from dlrm.atomic import fsync_dir, write_text_atomically
from dlrm.embedding.base import TablePiece
from dlrm.errors import UserError

LATEST = "latest"
META = "meta.json"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d{8})$")
_PIECE_FILE = re.compile(r"^r(\d+)-(\d+)_c(\d+)-(\d+)\.npy$")
_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_CHUNK_ROWS = 1 << 20  # rows copied out of or into a variable at a time (bounds host memory for big tables)

# A piece with its variables: {"value": weights, "<slot name>": optimizer slot of the same shape}.
PieceSlots = Tuple[TablePiece, Mapping[str, "object"]]


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used (missing, incomplete, or for a different model)."""

    on_every_rank = True  # every rank reads the same checkpoint: rank 0 reports


@dataclass(frozen=True)
class Collectives:
    """Who this process is and how it waits for the others (dlrm.dist in real runs)."""

    rank: int
    barrier: Callable[[], None]

    @staticmethod
    def from_dist() -> "Collectives":
        from dlrm import dist

        return Collectives(rank=dist.rank(), barrier=dist.barrier)


SINGLE_PROCESS = Collectives(rank=0, barrier=lambda: None)


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def piece_file_name(piece: TablePiece) -> str:
    return f"r{piece.row_start}-{piece.row_end}_c{piece.col_start}-{piece.col_end}.npy"


# ----------------------------------------------------------------------------------------------- save

def _save_array(path: str, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def _save_variable(path: str, variable) -> None:
    """Write a (possibly large) 2-D variable in row chunks so the host never holds two copies."""
    shape = tuple(variable.shape)
    if len(shape) != 2 or shape[0] <= _CHUNK_ROWS:
        _save_array(path, np.asarray(variable.numpy()))
        return
    out = np.lib.format.open_memmap(path, mode="w+", dtype=variable.dtype.as_numpy_dtype, shape=shape)
    for start in range(0, shape[0], _CHUNK_ROWS):
        out[start:start + _CHUNK_ROWS] = variable[start:start + _CHUNK_ROWS].numpy()
    out.flush()
    del out
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def _check_key(key: str, what: str) -> None:
    if not _KEY.match(key):
        raise ValueError(f"{what} {key!r} is not a safe file name (letters, digits, '_', '.', '-')")


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
    Every rank must call this with the same `root` and `step`.
    """
    comm = comm or Collectives.from_dist()
    final = os.path.join(root, step_dir_name(step))
    tmp = final + ".tmp"
    if comm.rank == 0:
        os.makedirs(root, exist_ok=True)
        if os.path.exists(tmp):
            shutil.rmtree(tmp)  # left over by a killed run: never complete, never loaded
        os.makedirs(os.path.join(tmp, "dense"))
        os.makedirs(os.path.join(tmp, "embedding"))
    comm.barrier()

    for piece, slots in stored_pieces:
        if "value" not in slots:
            raise ValueError(f"piece {piece} has no 'value' variable")
        for slot, variable in slots.items():
            _check_key(slot, "slot name")
            if tuple(variable.shape) != piece.shape:
                raise ValueError(f"piece {piece} slot {slot!r}: variable shape {tuple(variable.shape)} "
                                 f"!= piece shape {piece.shape}")
            directory = os.path.join(tmp, "embedding", f"t{piece.table}", slot)
            os.makedirs(directory, exist_ok=True)
            _save_variable(os.path.join(directory, piece_file_name(piece)), variable)

    if comm.rank == 0:
        dense_shapes = {}
        for key, variable in dense.items():
            _check_key(key, "dense key")
            array = np.asarray(variable.numpy())
            dense_shapes[key] = list(array.shape)
            _save_array(os.path.join(tmp, "dense", f"{key}.npy"), array)
        full_meta = dict(meta)
        full_meta.update(format_version=FORMAT_VERSION, step=int(step), dense_shapes=dense_shapes)
        write_text_atomically(os.path.join(tmp, META), json.dumps(full_meta, indent=1, sort_keys=True))
    comm.barrier()  # every rank's pieces are on disk

    if comm.rank == 0:
        for directory, _, _ in os.walk(tmp):
            fsync_dir(directory)
        if os.path.exists(final):  # same step written again (e.g. a rerun): replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(root)
        write_text_atomically(os.path.join(root, LATEST), step_dir_name(step) + "\n")
        _prune(root, keep, protect=step_dir_name(step))
    comm.barrier()
    return final


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
) -> dict:
    """Fill `dense` variables and every held piece's slots from `checkpoint_dir`; returns its meta.

    With `strict=False` the checkpoint may hold more than asked for (evaluation restores weights only,
    not optimizer slots); anything asked for must be there either way.
    """
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
