"""The training order key, Spark's `xxhash64(lit(seed), day, line)` reproduced in numpy.

Spark's XxHash64 expression chains XXH64 over its arguments starting from seed 42: an int argument is
hashed as 4 bytes (`hashInt`), a long as 8 (`hashLong`), each result seeding the next. `lit(seed)` is an
int when the seed fits 32 bits, else a long; `day` is an int and `line` a long. Keeping Spark's exact
function keeps the permutation of datasets written before (and lets Spark check it in a test).
"""
from __future__ import annotations

import numpy as np

from preproc_spark3.xxhash64 import hash_int, hash_long, hash_seed_literal


def shuffle_keys(seed: int, day: np.ndarray, line: np.ndarray) -> np.ndarray:
    """int64 keys equal to Spark's `xxhash64(lit(seed), day, line)` (day int32, line int64 arrays)."""
    n = len(line)
    with np.errstate(over="ignore"):
        h = hash_int(np.asarray(day, dtype=np.int32), np.full(n, hash_seed_literal(seed)[0], dtype=np.uint64))
        h = hash_long(np.asarray(line, dtype=np.int64), h)
    return h.view(np.int64)
