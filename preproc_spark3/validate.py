"""Parse raw Criteo TSV lines into typed columns and name the first problem of each malformed line.

A well-formed line has 40 tab-separated fields: label (0 or 1), 13 integers (optional sign, at most
18 digits, so they fit int64), 26 categoricals (1-8 hex digits, case-insensitive). Any integer or
categorical field may be empty (missing). Anything else is malformed: the row keeps a `reason`
(e.g. "I3: 'abc' is not an integer (at most 18 digits)") and a `kind` for the summary, and is
quarantined instead of being used.

The parse runs in the parse tasks (preproc_spark3.parse_job) on Arrow strings, vectorised with pyarrow
compute and numpy: the lines are split at tabs once, every field of every line is checked at once
from byte classes (`_well_formed`), and only lines failing it get the field-by-field check
(`line_problem`) that names their first problem.
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
SHOWN_CHARS = 32  # how much of a bad field a reason quotes

KIND_FIELD_COUNT, KIND_LABEL, KIND_INTEGER, KIND_CATEGORICAL = "field_count", "label", "integer", "categorical"
_INTEGER_FIELD = re.compile(_INT)
_HEX_FIELD = re.compile(_HEX)

_IS_DIGIT, _IS_HEX = 1, 2  # byte classes
_CLASS = np.zeros(256, dtype=np.uint8)
for _c in "0123456789":
    _CLASS[ord(_c)] = _IS_DIGIT | _IS_HEX
for _c in "abcdefABCDEF":
    _CLASS[ord(_c)] = _IS_HEX
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


def _well_formed(starts: np.ndarray, ends: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Rows of RAW_FIELD_COUNT fields (byte offsets [m, 40] into `data`) -> bool [m]: every field as the
    rules say. Counts of non-digit / non-hex bytes per field come from running sums over `data`."""
    lengths = ends - starts
    classes = _CLASS[data]
    not_digit = np.concatenate([[0], np.cumsum((classes & _IS_DIGIT) == 0, dtype=np.int32)])
    not_hex = np.concatenate([[0], np.cumsum((classes & _IS_HEX) == 0, dtype=np.int32)])
    first = data[np.minimum(starts, len(data) - 1)]
    label_ok = (lengths[:, 0] == 1) & ((first[:, 0] == ord("0")) | (first[:, 0] == ord("1")))
    ints = slice(1, 1 + len(NUMERICAL_COLUMNS))
    length = lengths[:, ints]
    sign = (length > 0) & (first[:, ints] == ord("-"))
    digits = length - sign
    int_ok = (length == 0) | ((not_digit[ends[:, ints]] - not_digit[starts[:, ints]] == sign)
                              & (digits >= 1) & (digits <= 18))
    cats = slice(1 + len(NUMERICAL_COLUMNS), None)
    hex_ok = (lengths[:, cats] <= 8) & (not_hex[ends[:, cats]] == not_hex[starts[:, cats]])
    return label_ok & int_ok.all(axis=1) & hex_ok.all(axis=1)


def parse_lines(lines) -> ParsedLines:
    """Arrow strings (one raw line each, no terminator) -> ParsedLines."""
    import pyarrow as pa
    import pyarrow.compute as pc

    fields = pc.split_pattern(lines, "\t")
    counts = pc.list_value_length(fields).to_numpy(zero_copy_only=False)
    list_offsets = np.frombuffer(fields.buffers()[1], dtype=np.int32)[fields.offset:fields.offset + len(fields) + 1]
    values = fields.values  # every field of every line; list_offsets index into it
    bounds = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + len(values) + 1]
    chars = values.buffers()[2]
    data = np.frombuffer(chars, dtype=np.uint8) if chars is not None else np.zeros(0, dtype=np.uint8)
    if not len(data):
        data = np.zeros(1, dtype=np.uint8)  # every field empty: nothing to read, but indexing needs a byte
    candidates = np.flatnonzero(counts == RAW_FIELD_COUNT)
    field = list_offsets[candidates][:, None] + np.arange(RAW_FIELD_COUNT, dtype=np.int32)
    starts, ends = bounds[field], bounds[field + 1]
    ok = _well_formed(starts, ends, data)
    good = np.zeros(len(lines), dtype=bool)
    good[candidates[ok]] = True
    bad_rows = np.flatnonzero(~good)
    problems = []
    for i in bad_rows:
        problem = line_problem(lines[int(i)].as_py())
        if problem is None:  # the vectorised check and the field checks disagree: a bug, not bad data
            raise AssertionError(f"line {lines[int(i)].as_py()!r} fails the vectorised check but no field check")
        problems.append(problem)
    kinds, reasons = [k for k, _ in problems], [r for _, r in problems]
    starts, ends, field = starts[ok], ends[ok], field[ok]
    first_categorical = 1 + len(NUMERICAL_COLUMNS)
    label = (data[np.minimum(starts[:, 0], len(data) - 1)] - ord("0")).astype(np.int8)
    integers = np.stack([_integers(pc.take(values, pa.array(field[:, i]))) for i in range(1, first_categorical)],
                        axis=1).reshape(len(field), len(NUMERICAL_COLUMNS))
    categorical = _hex_values((starts[:, first_categorical:], ends[:, first_categorical:]), data)
    return ParsedLines(good, label, integers, categorical, bad_rows, kinds, reasons)
