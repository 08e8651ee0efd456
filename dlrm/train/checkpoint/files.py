"""The files of a checkpoint: their names, writing .npy files in row chunks, and reading table regions.

Only .npy files (loaded with `allow_pickle=False`) and JSON; the directory layout is in the package
docstring (`dlrm.train.checkpoint`).
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import replace
from typing import Any, BinaryIO, Dict, Iterable, List, Mapping, Sequence, Tuple

import numpy as np

from dlrm.atomic import naming_file
from dlrm.checkpoint_layout import CheckpointError, step_dir_name  # noqa: F401 (named here too)
from dlrm.embedding.base import TablePiece

_PIECE_FILE = re.compile(r"^r(\d+)-(\d+)_c(\d+)-(\d+)\.npy$")
_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")
_CHUNK_ROWS = 1 << 20  # rows copied out of or into a variable at a time (bounds host memory for big tables)

# A piece with its variables: {"value": weights, "<slot name>": optimizer slot of the same shape}.
PieceSlots = Tuple[TablePiece, Mapping[str, Any]]
# The manifest's entries (`verify`): a file's path relative to the checkpoint -> [size in bytes, CRC32 in hex].
FileEntries = Dict[str, List]


class ChecksummedFile:
    """A binary file opened for writing that counts the bytes written through it and their CRC32 (the
    manifest's entry for it, `verify`)."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.size = 0
        self.crc = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        self.size += view.nbytes
        return self.f.write(view)

    def entry(self) -> List:
        return [self.size, f"{self.crc:08x}"]


def piece_file_name(piece: TablePiece) -> str:
    return f"r{piece.row_start}-{piece.row_end}_c{piece.col_start}-{piece.col_end}.npy"


def _write_npy(path: str, shape: Tuple[int, ...], dtype, chunks: Iterable[np.ndarray]) -> List:
    """Write an .npy file from consecutive row chunks with plain `write` calls, fsync it; returns its manifest
    entry (size, CRC32).

    Not `np.save` (a full disk gives "OSError: N requested and M written", no errno, no file name) and not
    a memory map (a full disk kills the process with SIGBUS): here it is OSError(ENOSPC) naming `path`.
    """
    try:
        with open(path, "wb") as f:
            out = ChecksummedFile(f)
            np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                       "fortran_order": False, "shape": tuple(shape)})
            for chunk in chunks:
                out.write(np.ascontiguousarray(chunk, dtype=dtype).reshape(-1).view(np.uint8).data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as error:
        raise naming_file(error, path) from error
    return out.entry()


def save_array(path: str, array: np.ndarray) -> List:
    return _write_npy(path, array.shape, array.dtype, [array])


def _save_variable(path: str, variable) -> List:
    """Write a (possibly large) 2-D variable in row chunks so the host never holds two copies."""
    shape = tuple(variable.shape)
    if len(shape) != 2 or shape[0] <= _CHUNK_ROWS:
        return save_array(path, np.asarray(variable.numpy()))
    chunks = (variable[start:start + _CHUNK_ROWS].numpy() for start in range(0, shape[0], _CHUNK_ROWS))
    return _write_npy(path, shape, variable.dtype.as_numpy_dtype, chunks)


def check_key(key: str, what: str) -> None:
    if not _KEY.match(key):
        raise ValueError(f"{what} {key!r} is not a safe file name (letters, digits, '_', '.', '-')")


def table_dir_name(name: str) -> str:
    """A table's directory under `embedding/`: its name, with any character outside [A-Za-z0-9_.-] (and a
    leading '.') written as %XX, so every feature name gives one safe directory of its own."""
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "_-." else "".join(f"%{b:02X}" for b in c.encode())
                   for c in name)
    return "%2E" + safe[1:] if safe.startswith(".") else safe


def write_pieces(directory: str, stored_pieces: Sequence[PieceSlots], table_names: Sequence[str]) -> FileEntries:
    """Every slot of every piece as `<directory>/embedding/<table name>/<slot>/<piece file>`; returns their
    manifest entries."""
    entries = {}
    for piece, slots in stored_pieces:
        table_dir = os.path.join("embedding", table_dir_name(table_names[piece.table]))
        for slot, variable in slots.items():
            os.makedirs(os.path.join(directory, table_dir, slot), exist_ok=True)
            relative = os.path.join(table_dir, slot, piece_file_name(piece))
            entries[relative] = _save_variable(os.path.join(directory, relative), variable)
    return entries


def check_pieces(stored_pieces: Sequence[PieceSlots]) -> None:
    for piece, slots in stored_pieces:
        if "value" not in slots:
            raise ValueError(f"piece {piece} has no 'value' variable")
        for slot, variable in slots.items():
            check_key(slot, "slot name")
            if tuple(variable.shape) != piece.shape:
                raise ValueError(f"piece {piece} slot {slot!r}: variable shape {tuple(variable.shape)} "
                                 f"!= piece shape {piece.shape}")


FILE_OVERHEAD_BYTES = 128 + 4096  # per .npy file: its header, and rounding up to a filesystem block
META_BYTES = 1 << 16  # meta.json (config and plan) and `latest`, an upper bound


def checkpoint_bytes(dense: Mapping[str, Any], stored_pieces: Sequence[PieceSlots], rank: int) -> int:
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


def saved_pieces(table_dir: str, table: int, slot: str) -> List[Tuple[TablePiece, str]]:
    """(piece of table index `table`, file) of every piece of `slot` saved in `table_dir` (feed them to
    `read_region`)."""
    directory = os.path.join(table_dir, slot)
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
    return out if out is not None else np.empty(wanted.shape, np.float32)  # an empty region


def restore_variable(variable, saved: List[Tuple[TablePiece, str]], piece: TablePiece) -> None:
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
