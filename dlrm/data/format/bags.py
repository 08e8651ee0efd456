"""The rules of a multi-hot row (a bag) in numpy: what the writer, the reference decode and the error
messages of the reader share.

A multi-hot feature stores `max_hotness` ids per row: its real ids first, then `PADDING_ID` (-1) to
the end of the row; a row may be all padding (an empty bag). Every other value must lie in
[0, cardinality). A one-hot feature has one id per row and no padding.
"""
from __future__ import annotations

import numpy as np

from dlrm.features import PADDING_ID


def bad_bag_rows(ids: np.ndarray, cardinality: int) -> np.ndarray:
    """bool [n]: the rows of ids [n, hotness] that break the rules (an id out of range, or an id after padding)."""
    ids = np.asarray(ids, dtype=np.int64)
    out_of_range = (ids < PADDING_ID) | (ids >= cardinality)
    padding = ids == PADDING_ID
    id_after_padding = padding[:, :-1] & ~padding[:, 1:]
    return out_of_range.any(axis=1) | id_after_padding.any(axis=1)


def bad_onehot_rows(ids: np.ndarray, cardinality) -> np.ndarray:
    """bool: which one-hot ids (of one table [n], or of tables [n, tables] with their cardinalities) are
    outside [0, cardinality) (-1 included: a one-hot row has no padding)."""
    ids = np.asarray(ids, dtype=np.int64)
    return (ids < 0) | (ids >= cardinality)


def bag_problem(bag: np.ndarray, cardinality: int) -> str:
    """What is wrong with one multi-hot row (the first bad value, left to right), for an error message."""
    values = [int(v) for v in bag]
    for position, value in enumerate(values):
        if value != PADDING_ID and not 0 <= value < cardinality:
            return f"id {value} at position {position} of the row {values} is outside [0, {cardinality})"
        if value == PADDING_ID and any(v != PADDING_ID for v in values[position + 1:]):
            return (f"padding {PADDING_ID} at position {position} of the row {values} is followed by an id "
                    f"(padding only at the end of a row)")
    return f"the row {values} is valid"


def onehot_problem(value: int, cardinality: int) -> str:
    return f"id {int(value)} is outside [0, {cardinality})"
