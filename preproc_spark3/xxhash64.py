"""Spark's XXH64 primitives in numpy: a 4-byte int (`hashInt`) or an 8-byte long (`hashLong`) hashed from a
per-element seed, as Spark's XxHash64 expression chains them from its seed 42 (an argument's result seeds the
next). Used to reproduce Spark's `xxhash64` outside Spark: the Criteo job's shuffle key and the tests'
references.
"""
from __future__ import annotations

import numpy as np

PRIME1 = np.uint64(0x9E3779B185EBCA87)
PRIME2 = np.uint64(0xC2B2AE3D27D4EB4F)
PRIME3 = np.uint64(0x165667B19E3779F9)
PRIME4 = np.uint64(0x85EBCA77C2B2AE63)
PRIME5 = np.uint64(0x27D4EB2F165667C5)
SPARK_SEED = 42


def rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def fmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * PRIME2
    h = h ^ (h >> np.uint64(29))
    h = h * PRIME3
    return h ^ (h >> np.uint64(32))


def hash_int(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of 4-byte ints (int32 values), per element seed."""
    h = seed + PRIME5 + np.uint64(4)
    h = h ^ (value.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)) * PRIME1
    return fmix(rotl(h, 23) * PRIME2 + PRIME3)


def hash_long(value: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """XXH64 of 8-byte longs, per element seed."""
    h = seed + PRIME5 + np.uint64(8)
    h = h ^ rotl(value.astype(np.int64).astype(np.uint64) * PRIME2, 31) * PRIME1
    return fmix(rotl(h, 27) * PRIME1 + PRIME4)


def hash_seed_literal(seed: int) -> np.ndarray:
    """The running hash after Spark's `lit(seed)`, the first argument of `xxhash64(lit(seed), ...)`: hashed
    from 42 as an int when the seed fits 32 bits, else as a long (one uint64, broadcasting as a seed)."""
    start, value = np.full(1, SPARK_SEED, dtype=np.uint64), np.full(1, seed, dtype=np.int64)
    with np.errstate(over="ignore"):
        return hash_int(value, start) if -(1 << 31) <= seed < (1 << 31) else hash_long(value, start)
