"""Find the raw day files, cut them into input splits and read a split's lines, numbered by the driver.

Lines follow Spark's (Hadoop's) text reader: `\\n`, `\\r\\n` and a lone `\\r` each end a line, empty
lines are lines, a last line without a terminator is a line, and no empty line follows a final
terminator. An uncompressed file is cut into byte ranges of `max_partition_bytes`; a line belongs to
the split holding its first byte. A compressed file (`.gz`, `.bz2`) is one split, decompressed as a
stream by its task. The driver numbers the lines from a count per split (the count job), so every
split knows its first line number before it is parsed.
"""
from __future__ import annotations

import bz2
import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

import numpy as np

from preproc_spark3.config import PreprocessError

_DAY_FILE = re.compile(r"day_(\d+)(?:\.([A-Za-z0-9]+))?")
CODECS = {"gz": gzip.open, "bz2": bz2.open}  # the compressed inputs a task can read
BLOCK_BYTES = 4 << 20  # bytes of lines a task parses at a time (small arrays: bounded memory, no page-fault churn)
_NL, _CR = 10, 13


def find_day_files(raw_dir: str, days: tuple[int, ...]) -> dict[int, Path]:
    """`day_<N>`, `day_<N>.gz` or `day_<N>.bz2` for each requested day N."""
    root = Path(raw_dir)
    if not root.is_dir():
        raise PreprocessError(f"raw data directory not found: {raw_dir}")
    found: dict[int, list[Path]] = {}
    for path in root.iterdir():
        match = _DAY_FILE.fullmatch(path.name)
        if match and path.is_file():
            found.setdefault(int(match.group(1)), []).append(path)
    files = {}
    for day in days:
        candidates = found.get(day, [])
        if not candidates:
            raise PreprocessError(f"raw file for day {day} not found: expected {root / f'day_{day}'} (or day_{day}.gz)")
        if len(candidates) > 1:
            raise PreprocessError(f"day {day} has several raw files: {sorted(str(p) for p in candidates)}")
        path = candidates[0]
        codec = codec_of(path)
        if codec is not None and codec not in CODECS:
            raise PreprocessError(f"raw file {path}: compression '.{codec}' is not supported; use the file "
                                  f"uncompressed or as {', '.join('.' + c for c in CODECS)}")
        if path.stat().st_size == 0:
            raise PreprocessError(f"raw file {path} is empty")
        files[day] = path
    return files


def codec_of(path: Path) -> Optional[str]:
    match = _DAY_FILE.fullmatch(path.name)
    return match.group(2) if match else None


@dataclass(frozen=True)
class InputSplit:
    """Lines of one day file whose first byte is in [start, end) (a compressed file: all its lines)."""

    index: int
    day: int
    path: str
    start: int
    end: int
    codec: Optional[str] = None

    @property
    def file_name(self) -> str:
        return Path(self.path).name


MIN_SPLIT_BYTES = 4 << 20
TASKS_PER_SLOT = 4  # small inputs: at least this many splits per task slot, so the slots finish together


def split_bytes(day_files: dict[int, Path], max_bytes: int, slots: int) -> int:
    """Bytes per split: `max_bytes`, or less when the input would give fewer than TASKS_PER_SLOT splits
    per task slot (never below MIN_SPLIT_BYTES)."""
    total = sum(path.stat().st_size for path in day_files.values())
    return min(max_bytes, max(MIN_SPLIT_BYTES, total // max(1, TASKS_PER_SLOT * slots)))


def plan_splits(day_files: dict[int, Path], max_bytes: int) -> list[InputSplit]:
    """Input splits of all day files in (day, byte) order."""
    splits: list[InputSplit] = []
    for day, path in sorted(day_files.items()):
        size, codec = path.stat().st_size, codec_of(path)
        bounds = [0, size] if codec else [*range(0, size, max_bytes), size]
        for start, end in zip(bounds[:-1], bounds[1:]):
            splits.append(InputSplit(len(splits), day, str(path.resolve()), start, end, codec))
    return splits


def _next_line_start(f: BinaryIO, position: int, size: int) -> int:
    """The first line start at or after `position` (`size` if none)."""
    if position <= 0:
        return 0
    if position >= size:
        return size
    f.seek(position - 1)
    pair = f.read(2)
    if pair[0] == _NL or (pair[0] == _CR and pair[1:2] != b"\n"):
        return position
    at = position
    while at < size:
        f.seek(at)
        piece = f.read(1 << 16)
        hits = [i for i in (piece.find(b"\n"), piece.find(b"\r")) if i >= 0]
        if hits:
            i = at + min(hits)
            if piece[min(hits)] == _CR:
                f.seek(i + 1)
                return min(size, i + (2 if f.read(1) == b"\n" else 1))
            return i + 1
        at += len(piece)
    return size


def _cut(buffer: bytes, final: bool) -> int:
    """Length of the longest prefix of `buffer` made of whole lines (everything when `final`)."""
    if final:
        return len(buffer)
    nl = buffer.rfind(b"\n")
    cr = buffer.rfind(b"\r", 0, len(buffer) - 1)  # a last \r may be the first half of \r\n
    return max(nl, cr) + 1


def line_blocks(split: InputSplit, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """The split's lines, terminators included, as consecutive blocks of whole lines."""
    if split.codec is not None:
        stream: BinaryIO = CODECS[split.codec](split.path, "rb")  # type: ignore[assignment,arg-type]
        left = None
    else:
        stream = open(split.path, "rb")
        size = Path(split.path).stat().st_size
        first, stop = _next_line_start(stream, split.start, size), _next_line_start(stream, split.end, size)
        stream.seek(first)
        left = stop - first
    try:
        pending = b""
        while True:
            want = block_bytes if left is None else min(block_bytes, left)
            try:
                piece = stream.read(want) if want > 0 else b""
            except (OSError, EOFError, ValueError) as e:  # corrupt archive
                raise PreprocessError(f"raw file {split.path}: cannot be read ({e})") from None
            if left is not None:
                left -= len(piece)
            final = not piece
            buffer = pending + piece
            end = _cut(buffer, final)
            if end:
                yield buffer[:end]
            pending = buffer[end:]
            if final:
                return
    finally:
        stream.close()


def _terminators(block: bytes) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Positions where lines end (their last terminator byte) and of every terminator byte (None: only \\n)."""
    data = np.frombuffer(block, dtype=np.uint8)
    newline = data == _NL
    if b"\r" not in block:
        return np.flatnonzero(newline), None
    carriage = data == _CR
    lone_cr = carriage.copy()
    lone_cr[:-1] &= ~newline[1:]
    return np.flatnonzero(newline | lone_cr), np.flatnonzero(newline | carriage)


def count_lines(block: bytes) -> int:
    """Lines in a block of whole lines."""
    if not block:
        return 0
    ends = block.count(b"\n") if b"\r" not in block else len(_terminators(block)[0])
    return ends + (0 if block[-1:] in (b"\n", b"\r") else 1)


def split_line_count(split: InputSplit) -> int:
    """The count job's task: lines of one input split."""
    return sum(count_lines(block) for block in line_blocks(split))


def lines_array(block: bytes):
    """A block of whole lines -> Arrow strings, one per line, without terminators (no copy but one).
    Bytes that are not UTF-8 become U+FFFD, as Spark's text reader decodes them (such a line is malformed
    and quarantined with them)."""
    import pyarrow as pa

    if not block.isascii():
        block = block.decode("utf-8", errors="replace").encode("utf-8")
    data = np.frombuffer(block, dtype=np.uint8)
    ends, removed = _terminators(block)
    if len(block) and block[-1:] not in (b"\n", b"\r"):
        ends = np.append(ends, len(block))  # a last line without terminator
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    if removed is None:  # only \n: line i starts after i removed bytes
        removed_before = np.arange(len(starts), dtype=np.int64)
        values = np.delete(data, ends[ends < len(data)])
    else:
        removed_before = np.searchsorted(removed, starts)
        values = np.delete(data, removed)
    offsets = np.append(starts - removed_before, len(values)).astype(np.int32)
    return pa.StringArray.from_buffers(len(starts), pa.py_buffer(offsets), pa.py_buffer(values))
