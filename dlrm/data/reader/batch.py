"""A decoded batch and the output arrays the reader decodes into, with explicit ownership.

A batch's arrays belong to whoever holds the batch. The consumer may hand them back with
`Batch.release()` once it is done with them (and with every view of them, e.g. a tensor sharing their
memory); the reader then decodes a later batch into them, which keeps a few sets in the CPU cache
instead of writing every batch into fresh memory. A batch never released is never overwritten: it
costs only a new allocation.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from dlrm.data.reader.decode_arrays import BatchArrays
from dlrm.data.reader.prefetch import batches_ahead

# (label, numerical, categorical, group or None): one batch's output arrays
OutputSet = tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray]]


@dataclass
class Batch:
    """This rank's contiguous slice of one global batch."""

    numerical: np.ndarray  # float32 [b, num_numerical]
    categorical: np.ndarray  # int32 [b, total_hotness]: each table's ids in table order, multi-hot rows -1 padded
    label: np.ndarray  # float32 [b]
    global_rows: int  # rows in the whole global batch (all ranks), for loss normalisation
    index: int = 0  # global batch index within the epoch
    first_row: int = 0  # dataset row of this slice's first row
    group: Optional[np.ndarray] = None  # int64 [b] group ids (the spec's `map` channel), else None
    pool: Optional["BatchBuffers"] = field(default=None, repr=False, compare=False)  # where release() returns

    def release(self) -> None:
        """Hand the arrays back to the reader for a later batch. Neither this batch nor any view of its
        arrays may be used afterwards; a second call does nothing."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.give_back(self)


def pooled_output_sets(prefetch: int, threads: int) -> int:
    """Released output sets a reader keeps for reuse: enough for what its prefetch may have taken, plus
    the consumer's batch and the one it just released."""
    return batches_ahead(prefetch, threads) + 2


class BatchBuffers:
    """Output arrays for a reader's batches: up to `keep` sets in a fixed order. A batch takes the
    first released set of its size (so the same few sets take turns and stay in the CPU cache), else
    a new one, which replaces the oldest in the pool when the pool is full (whoever holds the old set
    keeps it; the pool forgets it, so batches kept for long never starve the pool)."""

    def __init__(self, num_numerical: int, total_hotness: int, keep: int, group: bool = False):
        self._widths = (num_numerical, total_hotness)
        self._group = group
        self._keep = keep
        self._sets: list[OutputSet] = []
        self._released: list[bool] = []
        self._oldest = 0
        self._lock = threading.Lock()  # prefetch workers take sets while the consumer releases them

    def take(self, rows: int) -> OutputSet:
        """(label [rows], numerical [rows, F], categorical [rows, H], group [rows] or None) that no batch
        in use holds."""
        with self._lock:
            for k, arrays in enumerate(self._sets):
                if self._released[k] and arrays[0].shape[0] == rows:
                    self._released[k] = False
                    return arrays
            numerical, categorical = self._widths
            arrays = (np.empty(rows, dtype=np.float32), np.empty((rows, numerical), dtype=np.float32),
                      np.empty((rows, categorical), dtype=np.int32),
                      np.empty(rows, dtype=np.int64) if self._group else None)
            if len(self._sets) < self._keep:
                self._sets.append(arrays)
                self._released.append(False)
            elif self._keep:
                self._sets[self._oldest], self._released[self._oldest] = arrays, False
                self._oldest = (self._oldest + 1) % self._keep
            return arrays

    def give_back(self, batch: Batch) -> None:
        """Mark a released batch's arrays free for a later batch (if the pool still has them)."""
        with self._lock:
            for k, arrays in enumerate(self._sets):
                if arrays[0] is batch.label:
                    self._released[k] = True


def kernel_view(label: np.ndarray, numerical: np.ndarray, categorical: np.ndarray) -> BatchArrays:
    """The output arrays as the decode kernels write them (the numericals as float32 bit patterns)."""
    return BatchArrays(label, numerical.reshape(-1).view(np.uint32), categorical)
