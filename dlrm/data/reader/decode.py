"""The reader's kernels: what exists, what each does, and which implementation a process uses.

A kernel turns raw split-binary records (`RowSources`: the file mappings) into the trainer's batch
arrays (`BatchArrays`), or checks them without decoding, and returns the position of the first bad
value instead of raising (see `dlrm.data.reader.decode_arrays`). Each kernel exists twice with the same
arguments and results: plain numpy (`decode_numpy`, the reference: what the kernel does) and
compiled (`decode_numba`, the fast one, parallel over rows where it helps); tests check that the two
agree bit for bit.

Nothing happens at import: `host_kernels()` picks the set for this CPU on first use, and numba's
thread pool is set up by the first decode or check that asks for several threads.
"""
from __future__ import annotations

import functools
import os
import platform
from typing import Callable, NamedTuple

import numpy as np

from dlrm.data.reader import decode_numba, decode_numpy
from dlrm.data.reader.decode_arrays import (
    CATEGORICAL,
    CATEGORICAL_BLOCK_ROWS,
    CHECK_BLOCK_ROWS,
    LABEL,
    NO_ERROR,
    NUMERICAL,
    SCRATCH_PAD,
    BatchArrays,
    RowSources,
    earliest,
    empty_mapping,
    new_scratch,
    row_sources,
)
from dlrm.data.reader.decode_numba import part_bounds
from dlrm.data.reader.numba_threads import check_threading_layer

__all__ = ["CATEGORICAL", "CATEGORICAL_BLOCK_ROWS", "CHECK_BLOCK_ROWS", "LABEL", "NO_ERROR", "NUMERICAL",
           "SCRATCH_PAD", "BatchArrays", "RowSources", "earliest", "empty_mapping", "new_scratch", "row_sources",
           "check_threading_layer", "part_bounds", "Kernels", "NUMPY", "NUMBA", "select_kernels", "host_kernels",
           "check_rows"]


class Kernels(NamedTuple):
    """One implementation of each kernel. A result (kind, column, row) names the earliest bad value
    (lowest row, then kind LABEL < NUMERICAL < CATEGORICAL, then column) or is NO_ERROR; an index
    result is -1 when every value is good."""

    # (src uint8 [n], out float32 [n]) -> first index not 0 or 1
    decode_label: Callable[[np.ndarray, np.ndarray], int]
    # (src uint16 float16 bits [n], out uint32 float32 bits [n]) -> first inf/NaN index
    decode_half: Callable[[np.ndarray, np.ndarray], int]
    # (src uint32 float32 bits [n], out uint32 [n]) -> first inf/NaN index
    decode_single: Callable[[np.ndarray, np.ndarray], int]
    # (sources, first file row, scratch [tables, stride], out int32 [n, tables]) -> (table, row) of the
    # first id outside [0, cardinality), else (-1, -1)
    decode_categorical: Callable[[RowSources, int, np.ndarray, np.ndarray], tuple[int, int]]
    # (sources, first file row, parts, scratch [parts, tables, stride], out) -> (kind, column, batch row):
    # decode len(out.label) rows; the compiled one splits them into `parts` row ranges on numba's threads
    decode_rows: Callable[[RowSources, int, int, np.ndarray, BatchArrays], tuple[int, int, int]]
    # (sources, lo, hi) -> (kind, column, file row, positive labels) of file rows [lo, hi), no decode
    check_block: Callable[[RowSources, int, int], tuple[int, int, int, int]]


def _kernel_set(module) -> Kernels:
    return Kernels(*(getattr(module, name) for name in Kernels._fields))


NUMPY = _kernel_set(decode_numpy)
NUMBA = _kernel_set(decode_numba)


def select_kernels(machine: str, cpu_features) -> Kernels:
    """The compiled set on x86-64 with F16C (its two vector steps need it: `dlrm.data.reader.simd`), else numpy."""
    # NUMBA_CPU_NAME (e.g. "generic" for portable caches) compiles for another CPU than this one's F16C.
    if machine in ("x86_64", "AMD64") and cpu_features.get("f16c", False) and not os.environ.get("NUMBA_CPU_NAME"):
        return NUMBA
    return NUMPY


@functools.lru_cache(maxsize=None)
def host_kernels() -> Kernels:
    """This CPU's kernel set (`select_kernels`), chosen on first use."""
    from llvmlite import binding as llvm

    return select_kernels(platform.machine(), llvm.get_host_cpu_features())


def check_rows(sources: RowSources, begin: int, end: int, threads: int = 1,
               block_rows: int = CHECK_BLOCK_ROWS) -> tuple[int, tuple[int, int, int]]:
    """Check file rows [begin, end) without decoding, in blocks of `block_rows` on `threads` of numba's
    threads: (positive labels, (kind, column, file row) of the earliest bad value or NO_ERROR),
    whatever the threads and blocks. Always compiled: the check needs no CPU-specific instruction."""
    return decode_numba.check_rows(sources, begin, end, threads, block_rows)
