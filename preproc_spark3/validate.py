"""Parse raw Criteo TSV lines into typed columns and name the first problem of each malformed line.

A well-formed line has 40 tab-separated fields: label (0 or 1), 13 integers (optional sign, at most
18 digits, so they fit int64), 26 categoricals (1-8 hex digits, case-insensitive). Any integer or
categorical field may be empty (missing). Anything else is malformed: the row keeps a `reason`
(e.g. "I3: 'abc' is not an integer (at most 18 digits)") and a `kind` for the summary, and is
quarantined instead of being used.

The parse runs in the parse tasks (preproc_spark3.parse_job) on Arrow strings, vectorised with pyarrow
compute and numpy: one whole-line regex decides well-formedness, and only lines failing it get the
field-by-field check (`line_problem`) that names their first problem.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, RAW_FIELD_COUNT

_INT = r"-?[0-9]{1,18}"
_HEX = r"[0-9a-fA-F]{1,8}"
INTEGER_PATTERN = f"^{_INT}$"
HEX_PATTERN = f"^{_HEX}$"
# The whole of a well-formed line in one pattern (fields may be empty).
LINE_PATTERN = (rf"^[01](\t({_INT})?){{{len(NUMERICAL_COLUMNS)}}}"
                rf"(\t({_HEX})?){{{len(CATEGORICAL_COLUMNS)}}}$")
SHOWN_CHARS = 32  # how much of a bad field a reason quotes

KIND_FIELD_COUNT, KIND_LABEL, KIND_INTEGER, KIND_CATEGORICAL = "field_count", "label", "integer", "categorical"
_INTEGER_FIELD = re.compile(_INT)
_HEX_FIELD = re.compile(_HEX)

_LOW_NIBBLES, _ONES, _ALL = np.uint64(0x0F0F0F0F0F0F0F0F), np.uint64(0x0101010101010101), np.uint64(2**64 - 1)


def line_problem(text: str) -> Optional[tuple[str, str]]:
    """(kind, reason) of the first problem of a raw line, or None when it is well formed."""
    fields = text.split("\t")
    if len(fields) != RAW_FIELD_COUNT:
        return KIND_FIELD_COUNT, (f"wrong field count: {len(fields)} tab-separated fields, "
                                  f"expected {RAW_FIELD_COUNT}")
    if fields[0] not in ("0", "1"):
        return KIND_LABEL, f"{LABEL}: '{fields[0][:SHOWN_CHARS]}' is not 0 or 1"
    for name, field in zip(NUMERICAL_COLUMNS, fields[1:]):
        if field and not _INTEGER_FIELD.fullmatch(field):
            return KIND_INTEGER, f"{name}: '{field[:SHOWN_CHARS]}' is not an integer (at most 18 digits)"
    for name, field in zip(CATEGORICAL_COLUMNS, fields[1 + len(NUMERICAL_COLUMNS):]):
        if field and not _HEX_FIELD.fullmatch(field):
            return KIND_CATEGORICAL, f"{name}: '{field[:SHOWN_CHARS]}' is not a hex value (1-8 hex digits)"
    return None


def _hex_values(offsets: tuple[np.ndarray, np.ndarray], data: np.ndarray) -> np.ndarray:
    """Fields of 0-8 hex digits, given by their start/end byte offsets [n, k] into `data` -> int64 values
    (the hash read as an unsigned number); an empty field -> MISSING.

    Each field's last 8 bytes are read as one big-endian 64-bit word (an unaligned strided view), and the
    digits are combined inside the word (SWAR), so every step is one numpy pass over the fields."""
    starts, ends = offsets
    padded = np.concatenate([np.zeros(8, dtype=np.uint8), data])
    words: np.ndarray = np.ndarray(shape=(len(data) + 1,), dtype=">u8", buffer=padded, strides=(1,))  # data[j-8:j]
    word = words[ends.ravel()].astype(np.uint64)
    digits = (word & _LOW_NIBBLES) + ((word >> np.uint64(6)) & _ONES) * np.uint64(9)  # '0'-'9', a-f, A-F
    lengths = (ends - starts).ravel().astype(np.uint64)
    keep = np.where(lengths >= 8, _ALL, (np.uint64(1) << (np.uint64(8) * np.minimum(lengths, 7))) - np.uint64(1))
    x = digits & keep  # bytes before the field's start -> 0
    x = (x | (x >> np.uint64(4))) & np.uint64(0x00FF00FF00FF00FF)
    x = (x | (x >> np.uint64(8))) & np.uint64(0x0000FFFF0000FFFF)
    x = (x | (x >> np.uint64(16))) & np.uint64(0x00000000FFFFFFFF)
    values = x.astype(np.int64).reshape(starts.shape)
    values[starts == ends] = MISSING
    return values


def _integers(column):
    """Arrow strings of integers ('' = missing) -> int64 values, missing -> 0 (what the transform makes of it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.fill_null(pc.cast(pc.if_else(pc.equal(column, ""), pa.scalar(None, pa.string()), column),
                                pa.int64()), 0).to_numpy()


MISSING = -1  # categorical value of an empty field


@dataclass
class ParsedLines:
    """A block of raw lines, parsed. Arrays of the well-formed lines (`good` rows, in order) and, for the
    malformed ones, their row index, kind and reason."""

    good: np.ndarray  # bool [n]
    label: np.ndarray  # int8 [n_good]
    integers: np.ndarray  # int64 [n_good, 13], missing -> 0
    categorical: np.ndarray  # int64 [n_good, 26], missing -> MISSING
    bad_rows: np.ndarray  # int64 row indices of the malformed lines
    kinds: list[str]
    reasons: list[str]


def parse_lines(lines) -> ParsedLines:
    """Arrow strings (one raw line each, no terminator) -> ParsedLines."""
    import pyarrow as pa
    import pyarrow.compute as pc

    good = pc.match_substring_regex(lines, LINE_PATTERN).to_numpy(zero_copy_only=False)
    bad_rows = np.flatnonzero(~good)
    problems = []
    for i in bad_rows:
        problem = line_problem(lines[int(i)].as_py())
        if problem is None:  # the whole-line pattern and the field checks disagree: a bug, not bad data
            raise AssertionError(f"line {lines[int(i)].as_py()!r} fails {LINE_PATTERN!r} but no field check")
        problems.append(problem)
    kinds, reasons = [k for k, _ in problems], [r for _, r in problems]
    if not good.any():
        return ParsedLines(good, np.zeros(0, dtype=np.int8), np.zeros((0, len(NUMERICAL_COLUMNS)), dtype=np.int64),
                           np.zeros((0, len(CATEGORICAL_COLUMNS)), dtype=np.int64), bad_rows, kinds, reasons)
    kept = lines if not len(bad_rows) else pc.filter(lines, pa.array(good))
    n = len(kept)
    flat = pc.split_pattern(kept, "\t").flatten()  # RAW_FIELD_COUNT fields per line
    bounds = np.frombuffer(flat.buffers()[1], dtype=np.int32)[flat.offset:flat.offset + len(flat) + 1]
    data = np.frombuffer(flat.buffers()[2], dtype=np.uint8)
    starts = bounds[:-1].reshape(n, RAW_FIELD_COUNT)
    ends = bounds[1:].reshape(n, RAW_FIELD_COUNT)
    first_categorical = 1 + len(NUMERICAL_COLUMNS)
    label = (data[starts[:, 0]] - ord("0")).astype(np.int8)
    stride = np.arange(n, dtype=np.int64) * RAW_FIELD_COUNT
    integers = np.stack([_integers(pc.take(flat, pa.array(stride + i))) for i in range(1, first_categorical)], axis=1)
    categorical = _hex_values((starts[:, first_categorical:], ends[:, first_categorical:]), data)
    return ParsedLines(good, label, integers, categorical, bad_rows, kinds, reasons)
