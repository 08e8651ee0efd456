"""The training order key, Spark's `xxhash64(lit(seed), day, line)` reproduced in numpy.

Spark's XxHash64 expression chains XXH64 over its arguments starting from seed 42: an int argument is
hashed as 4 bytes (`hashInt`), a long as 8 (`hashLong`), each result seeding the next. `lit(seed)` is an
int when the seed fits 32 bits, else a long; `day` is an int and `line` a long. Keeping Spark's exact
function keeps the permutation of datasets written before (and lets Spark check it in a test).
"""
from __future__ import annotations

import numpy as np

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
SPARK_SEED = 42
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * _P2
    h = h ^ (h >> np.uint64(29))
    h = h * _P3
    return h ^ (h >> np.uint64(32))


def _hash_int(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of 4-byte ints (int32 values), per element seed."""
    h = seed + _P5 + np.uint64(4)
    h = h ^ (value.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)) * _P1
    return _fmix(_rotl(h, 23) * _P2 + _P3)


def _hash_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of 8-byte longs, per element seed."""
    h = seed + _P5 + np.uint64(8)
    h = h ^ _rotl(value.astype(np.int64).astype(np.uint64) * _P2, 31) * _P1
    return _fmix(_rotl(h, 27) * _P1 + _P4)


def shuffle_keys(seed: int, day: np.ndarray, line: np.ndarray) -> np.ndarray:
    """int64 keys equal to Spark's `xxhash64(lit(seed), day, line)` (day int32, line int64 arrays)."""
    n = len(line)
    with np.errstate(over="ignore"):
        start, seeds = np.full(1, SPARK_SEED, dtype=np.uint64), np.full(1, seed, dtype=np.int64)
        first = _hash_int(seeds, start) if _INT32[0] <= seed <= _INT32[1] else _hash_long(seeds, start)
        h = _hash_int(np.asarray(day, dtype=np.int32), np.full(n, first[0], dtype=np.uint64))
        h = _hash_long(np.asarray(line, dtype=np.int64), h)
    return h.view(np.int64)
