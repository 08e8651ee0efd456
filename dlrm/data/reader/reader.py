"""Split-binary datasets, reading side: a prefetching, rank-slicing batch reader.

The file layout is described in `dlrm.data.format.writer`. The reader maps the files read-only
(`dlrm.data.reader.mapped_files`), decodes each batch with the kernels of `dlrm.data.reader.decode`
into output arrays whose ownership `dlrm.data.reader.batch` describes, and checks every value it
decodes.
"""
from __future__ import annotations

import functools
import threading
from typing import Iterator

import numpy as np

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader import decode
from dlrm.data.reader.batch import Batch, BatchBuffers, kernel_view, pooled_output_sets
from dlrm.data.reader.mapped_files import MappedFiles
from dlrm.data.reader.prefetch import prefetched

PARTIAL_BATCH_RULES = ("keep", "drop")
# Decoding inline on k threads splits a batch into k row ranges, none smaller than this:
# below it, starting the threads costs more than they save.
MIN_ROWS_PER_THREAD = 8192


def rank_slice(batch_rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """[begin, end) of `rank`'s contiguous share of a batch of `batch_rows` rows, split as evenly as
    possible (the first `batch_rows % world_size` ranks get one row more; a rank may get 0 rows)."""
    base, extra = divmod(batch_rows, world_size)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


class BatchReader:
    """Iterates one mapping in global batches, yielding this rank's contiguous slice of each.

    A batch holds every table's ids side by side, [b, total_hotness] in table order (one-hot, then
    multi-hot with its -1 padding), and the group ids when the spec has a `map` channel.

    - `partial_batch="keep"` yields the last, smaller global batch (split as evenly as possible over
      the ranks); `"drop"` skips it and reports the skipped rows in `rows_skipped`. Nothing else is
      ever skipped.
    - `len(reader)` is the number of global batches in an epoch. The first iteration starts at
      `start_batch` (resume mid-epoch), later iterations at 0; `iter_from(i)` starts anywhere.
    - `threads=k` decode threads. With `prefetch` > 0, k background threads each decode whole
      batches ahead of the consumer (at most `prefetch` + k decoded or being decoded); with
      `prefetch=0`, each batch is decoded when asked for, its rows split into k ranges on numba's
      threads (one parallel region per batch). Whole batches per thread suit prefetching: no thread
      waits for another at a barrier, so a thread the OS preempts (the consumer wakes on the same cores)
      delays only its own batch.
    - Opening checks the files (exist, whole records, equal row counts); every decoded row is
      checked (label 0/1, numericals finite, ids in [0, cardinality), -1 only as the trailing padding
      of a multi-hot row) inside the conversion loop,
      so the checks are always on; errors name the file, the feature and the row. `check_all()`
      checks a whole mapping without decoding (the trainer's start-up check: `dlrm.data.reader.validate`).
    - Each batch owns its arrays until the consumer calls `batch.release()`; the reader then decodes
      later batches into them (`dlrm.data.reader.batch`). Unreleased batches are never overwritten.
    """

    def __init__(self, spec: FeatureSpec, mapping: str, global_batch_size: int, rank: int = 0,
                 world_size: int = 1, partial_batch: str = "keep", prefetch: int = 4, start_batch: int = 0,
                 threads: int = 1):
        if global_batch_size < 1:
            raise ValueError(f"global_batch_size must be >= 1, got {global_batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside [0, world_size={world_size})")
        if partial_batch not in PARTIAL_BATCH_RULES:
            raise ValueError(f"partial_batch must be one of {PARTIAL_BATCH_RULES}, got {partial_batch!r}")
        if prefetch < 0 or threads < 1:
            raise ValueError(f"prefetch must be >= 0 and threads >= 1, got {prefetch}, {threads}")
        spec.validate(check_files=True, mappings=[mapping])
        self.spec, self.mapping = spec, mapping
        self.global_batch_size, self.rank, self.world_size = global_batch_size, rank, world_size
        self.partial_batch, self.prefetch, self.threads = partial_batch, prefetch, threads
        self.files = MappedFiles(spec, mapping)
        self.chunks, self.num_rows = self.files.chunks, self.files.num_rows
        self.num_numerical, self.num_categorical = self.files.num_numerical, self.files.num_categorical
        self.total_hotness = self.files.total_hotness
        full, remainder = divmod(self.num_rows, global_batch_size)
        if partial_batch == "keep":
            self.num_batches, self.rows_skipped = full + (1 if remainder else 0), 0
        else:
            self.num_batches, self.rows_skipped = full, remainder
        if not 0 <= start_batch <= self.num_batches:
            raise ValueError(f"start_batch {start_batch} is outside [0, {self.num_batches}]")
        self.start_batch = start_batch
        self._iterated = False
        self._thread_local = threading.local()
        self._kernels = decode.host_kernels()
        self._buffers = BatchBuffers(self.num_numerical, self.total_hotness,
                                     keep=pooled_output_sets(prefetch, threads), group=self.files.group is not None)

    def __len__(self) -> int:
        return self.num_batches

    def local_rows(self, index: int) -> tuple[int, int]:
        """Dataset rows [begin, end) this rank reads for global batch `index`."""
        first = index * self.global_batch_size
        batch_rows = min(self.global_batch_size, self.num_rows - first)
        begin, end = rank_slice(batch_rows, self.rank, self.world_size)
        return first + begin, first + end

    def read_batch(self, index: int) -> Batch:
        """Decode global batch `index` (this rank's slice) now, its rows split over the calling thread
        and `threads` - 1 of numba's."""
        return self._decode(index, self.threads)

    def _decode(self, index: int, threads: int) -> Batch:
        if not 0 <= index < self.num_batches:
            raise IndexError(f"batch {index} is outside [0, {self.num_batches})")
        begin, end = self.local_rows(index)
        global_rows = min(self.global_batch_size, self.num_rows - index * self.global_batch_size)
        label, numerical, categorical, group = self._buffers.take(end - begin)
        parts = max(1, min(threads, (end - begin) // MIN_ROWS_PER_THREAD))
        kind, column, row = self._kernels.decode_rows(self.files.sources, begin, parts, self._scratch(parts),
                                                      kernel_view(label, numerical, categorical))
        if group is not None and self.files.group is not None:
            group[:] = self.files.group[begin:end]
        batch = Batch(numerical, categorical, label, global_rows, index, begin, group, pool=self._buffers)
        if kind >= 0:
            batch.release()
            raise self.files.bad_value(kind, column, begin + row)
        return batch

    def _scratch(self, parts: int) -> np.ndarray:
        """Per-thread scratch for the decode (a reader may decode on its prefetch threads and the caller's)."""
        scratch = getattr(self._thread_local, "scratch", None)
        if scratch is None or scratch.shape[0] < parts:
            scratch = decode.new_scratch(parts, self.files.num_onehot)
            self._thread_local.scratch = scratch
        return scratch

    # -- iteration
    def __iter__(self) -> Iterator[Batch]:
        first = 0 if self._iterated else self.start_batch
        self._iterated = True
        return self.iter_from(first)

    def iter_from(self, first_batch: int) -> Iterator[Batch]:
        """Batches first_batch .. len-1 of this rank (prefetched in the background)."""
        if not 0 <= first_batch <= self.num_batches:
            raise ValueError(f"first_batch {first_batch} is outside [0, {self.num_batches}]")
        if self.prefetch == 0:
            return (self.read_batch(i) for i in range(first_batch, self.num_batches))
        whole_batch = functools.partial(self._decode, threads=1)  # each worker decodes whole batches
        return prefetched(whole_batch, range(first_batch, self.num_batches), self.prefetch, self.threads)

    def check_all(self) -> int:
        """Check every value of the mapping (all ranks' rows, partial batch included) on `threads`
        threads, without decoding; raises the DataError of the earliest bad row, else returns the
        number of rows checked."""
        self.files.raise_for(self.files.check_rows(0, self.num_rows, self.threads)[1])
        return self.num_rows
