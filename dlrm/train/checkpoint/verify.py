"""Checking a checkpoint before anything reads it: every file against the manifest, every array finite.

A checkpoint of format 3 lists each file it wrote in `manifest.json` with its size in bytes and its CRC32
(`zlib.crc32`, computed while the file is written; the manifest carries the CRC32 of its own list).
Verification reads each file once: its size, its CRC32 and, for an .npy file, that every floating-point
value is finite. Checkpoints of formats 1 and 2 (no manifest) are checked for readable, finite arrays.
The ranks share the files by size (`share_by_size`) and agree on the outcome (`protocol`).
"""
from __future__ import annotations

import json
import os
import zlib
from typing import BinaryIO, Dict, List, Optional, Tuple
from urllib.parse import unquote

import numpy as np

from dlrm.train.checkpoint.directory import META, read_meta
from dlrm.train.checkpoint.files import CheckpointError, FileEntries

MANIFEST = "manifest.json"
CHECKSUM = "crc32"
FIRST_FORMAT_WITH_MANIFEST = 3
_READ_BYTES = 8 << 20  # read at a time while checking a file

def text_entry(text: str) -> List:
    data = text.encode("utf-8")
    return [len(data), f"{zlib.crc32(data):08x}"]


def manifest_text(files: FileEntries) -> str:
    body = json.dumps(files, sort_keys=True)
    return json.dumps({"checksum": CHECKSUM, "files": json.loads(body), "self": f"{zlib.crc32(body.encode()):08x}"},
                      indent=0, sort_keys=True)


def describe(relative: str) -> str:
    """A checkpoint file as the user knows it: the dense variable, or the table, slot and piece."""
    parts = relative.split("/")
    if len(parts) == 4 and parts[0] == "embedding":
        return f"table {unquote(parts[1])!r}, slot {parts[2]!r}, piece {parts[3][:-len('.npy')]}"
    if len(parts) == 2 and parts[0] == "dense":
        return f"dense variable {parts[1][:-len('.npy')]!r}"
    return relative


def damaged(directory: str, relative: str, problem: str) -> CheckpointError:
    return CheckpointError(f"checkpoint {directory} is damaged: {os.path.join(directory, relative)} "
                           f"({describe(relative)}) {problem}")


def read_manifest(directory: str) -> Optional[FileEntries]:
    """The manifest's file entries, or None for a checkpoint written before manifests (format 1 or 2)."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        meta_format = read_meta(directory).get("format_version", 0)
        if not isinstance(meta_format, int) or meta_format >= FIRST_FORMAT_WITH_MANIFEST:
            raise damaged(directory, MANIFEST, f"is missing (meta.json says format {meta_format})")
        return None
    try:
        with open(path, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
        files = manifest["files"]
        body = json.dumps(files, sort_keys=True)
        intact = manifest["checksum"] == CHECKSUM and manifest["self"] == f"{zlib.crc32(body.encode()):08x}"
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise damaged(directory, MANIFEST, f"cannot be read: {error}") from None
    if not intact:
        raise damaged(directory, MANIFEST, "does not match its own checksum (bytes changed)")
    return files


def _npy_files(directory: str) -> List[str]:
    """Every .npy file of a checkpoint without a manifest, relative to it."""
    found = []
    for parent, _, names in os.walk(directory):
        found += [os.path.relpath(os.path.join(parent, name), directory) for name in names if name.endswith(".npy")]
    return sorted(found)


def check_file(directory: str, relative: str, expected: Optional[List]) -> None:
    """Read one file once: its size and CRC32 against `expected` (None: no manifest), and for an .npy file
    that it is a plain numeric array whose floating-point values are all finite."""
    path = os.path.join(directory, relative)
    try:
        size = os.path.getsize(path)
        if expected is not None and size != expected[0]:
            raise damaged(directory, relative, f"has {size} bytes, the manifest says {expected[0]} (truncated or "
                                               f"overwritten)")
        with open(path, "rb") as f:
            crc, finite = _read_checked(f, relative.endswith(".npy"))
    except OSError as error:
        raise damaged(directory, relative, f"cannot be read: {error.strerror or error}") from None
    except ValueError as error:
        raise damaged(directory, relative, f"is not a plain numeric .npy array ({error})") from None
    if expected is not None and f"{crc:08x}" != expected[1]:
        raise damaged(directory, relative, "does not match its checksum in the manifest (bytes changed)")
    if not finite:
        raise damaged(directory, relative, "holds NaN or infinite values")


_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _read_checked(f: BinaryIO, npy: bool) -> Tuple[int, bool]:
    """(CRC32 of the whole file, whether every value of an .npy file's floating-point array is finite)."""
    dtype = None
    crc = 0
    if npy:
        version = np.lib.format.read_magic(f)
        if version not in _HEADER_READERS:
            raise ValueError(f".npy format version {version}")
        shape, _, dtype = _HEADER_READERS[version](f)
        if dtype.hasobject:
            raise ValueError("it holds Python objects")
        header_end = f.tell()
        data_bytes = os.fstat(f.fileno()).st_size - header_end
        if data_bytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ValueError(f"its header says {shape} {dtype}, which is not the {data_bytes} bytes of data it "
                             f"holds: truncated")
        f.seek(0)
        crc = zlib.crc32(f.read(header_end))
    floating = dtype if dtype is not None and dtype.kind == "f" else None
    chunk_bytes = _READ_BYTES - _READ_BYTES % floating.itemsize if floating is not None else _READ_BYTES
    finite = True
    while True:
        chunk = f.read(chunk_bytes)
        if not chunk:
            return crc, finite
        crc = zlib.crc32(chunk, crc)
        if floating is not None and finite:
            finite = bool(np.isfinite(np.frombuffer(chunk, dtype=floating)).all())


def share_by_size(sizes: Dict[str, int], ranks: int) -> List[List[str]]:
    """The files of each rank: biggest first, each to the rank holding the fewest bytes so far (the lowest on a
    tie), so every rank reads about as much (within one file) and every rank computes the same shares."""
    shares: List[List[str]] = [[] for _ in range(ranks)]
    held = [0] * ranks
    for name in sorted(sizes, key=lambda name: (-sizes[name], name)):
        rank = held.index(min(held))
        shares[rank].append(name)
        held[rank] += sizes[name]
    return shares


def _size_on_disk(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0  # missing or unreadable: its check says so


def check_share(directory: str, rank: int, size: int) -> None:
    """Check this rank's share of a checkpoint's files (`share_by_size`; all of them for one process); raises
    CheckpointError."""
    files = read_manifest(directory)
    names = sorted(files) if files is not None else [META] + _npy_files(directory)
    if files is not None and rank == 0:  # restore finds pieces by listing directories: no stray array may join
        unlisted = sorted(set(_npy_files(directory)) - set(files))
        if unlisted:
            raise damaged(directory, unlisted[0], "is not listed in the manifest (a file added after the "
                                                  "checkpoint was written)")
    sizes = {name: int(files[name][0]) if files is not None else _size_on_disk(os.path.join(directory, name))
             for name in names}
    for relative in share_by_size(sizes, size)[rank]:
        check_file(directory, relative, None if files is None else files[relative])
