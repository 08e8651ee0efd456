"""Split-binary datasets: a streaming writer and a prefetching, rank-slicing batch reader.

Layout per mapping folder (paths come from the feature spec's `source_spec`):
`label.bin` (bool, 1 byte/row), `numerical.bin` (float16, row-major, one column per numerical
feature), `cat_<i>.bin` (the smallest of int8/int16/int32 holding the feature's cardinality).
Files are headerless, little-endian, fixed-size records, so row r of every file is at r * record size.
"""
from __future__ import annotations

import functools
import mmap
import os
import sys
import threading
from dataclasses import dataclass
from typing import Iterator, Sequence, Union

import numpy as np

from dlrm.data import decode
from dlrm.data.errors import DataError
from dlrm.data.feature_spec import (CATEGORICAL_CHANNEL, LABEL_CHANNEL, NUMERICAL_CHANNEL, BinaryChunk,
                                    FeatureSpec)

PARTIAL_BATCH_RULES = ("keep", "drop")
# Decoding inline on k threads splits a batch into k row ranges, none smaller than this:
# below it, starting the threads costs more than they save.
MIN_ROWS_PER_THREAD = 8192


@dataclass
class Batch:
    """This rank's contiguous slice of one global batch."""

    numerical: np.ndarray  # float32 [b, num_numerical]
    categorical: np.ndarray  # int32 [b, num_categorical]
    label: np.ndarray  # float32 [b]
    global_rows: int  # rows in the whole global batch (all ranks), for loss normalisation
    index: int = 0  # global batch index within the epoch
    first_row: int = 0  # dataset row of this slice's first row


def split_by_channel(chunks: list[BinaryChunk]) -> tuple[BinaryChunk, "BinaryChunk | None", list[BinaryChunk]]:
    """(label chunk, numerical chunk or None, categorical chunks in table order) of a mapping's files."""
    by_channel = {LABEL_CHANNEL: [], NUMERICAL_CHANNEL: [], CATEGORICAL_CHANNEL: []}
    for chunk in chunks:
        by_channel[chunk.channel].append(chunk)
    return by_channel[LABEL_CHANNEL][0], (by_channel[NUMERICAL_CHANNEL] or [None])[0], by_channel[CATEGORICAL_CHANNEL]


def _spec_at(spec: FeatureSpec, directory: str) -> FeatureSpec:
    return FeatureSpec(spec.feature_spec, spec.source_spec, spec.channel_spec, spec.metadata, directory)


# ====================================================================== writer
class SplitBinaryWriter:
    """Appends row chunks to one mapping's files; `close()` publishes them (atomic rename).

    Files are written as `<file>.partial` and renamed on `close()`, so a crashed writer never leaves
    a file that looks complete. Every chunk is validated before anything of it is written: labels in
    {0, 1}, numericals finite and within float16 range, ids in [0, cardinality); errors name the
    file, feature and row (row = index within the mapping, counting earlier chunks).
    """

    def __init__(self, out_dir: str, spec: FeatureSpec, mapping: str):
        self.spec = _spec_at(spec, os.path.abspath(out_dir))
        self.spec.validate(check_files=False, mappings=[mapping])
        self.mapping = mapping
        self.chunks = self.spec.binary_chunks(mapping)
        self.label_chunk, self.numerical_chunk, self.categorical_chunks = split_by_channel(self.chunks)
        self.cardinalities = self.spec.cardinalities
        self.rows_written = 0
        self._files = {}
        for chunk in self.chunks:
            os.makedirs(os.path.dirname(chunk.path), exist_ok=True)
            self._files[chunk.path] = open(chunk.path + ".partial", "wb")

    # -- public API
    def write(self, label, numerical, categorical: Union[np.ndarray, Sequence[np.ndarray]]) -> None:
        """Append rows. label [n] (bool or 0/1), numerical [n, num_numerical], categorical [n, tables]
        or a sequence of `tables` 1-D id arrays of length n (columns avoid a transpose)."""
        if not self._files:
            raise RuntimeError("SplitBinaryWriter is closed")
        label = np.asarray(label)
        n = label.shape[0] if label.ndim == 1 else -1
        if n < 0:
            raise DataError(f"label must be 1-D, got shape {label.shape}", self.label_chunk.path, self.spec.label_name)
        label_bytes = self._check_label(label)
        numerical_bytes = self._check_numerical(numerical, n)
        columns = self._check_categorical(categorical, n)
        self._files[self.label_chunk.path].write(label_bytes)
        if self.numerical_chunk is not None:
            self._files[self.numerical_chunk.path].write(numerical_bytes)
        for chunk, column in zip(self.categorical_chunks, columns):
            self._files[chunk.path].write(column)
        self.rows_written += n

    def close(self) -> int:
        """Flush, fsync and rename the files into place; returns the number of rows written."""
        for path, f in self._files.items():
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.replace(path + ".partial", path)
        self._files = {}
        return self.rows_written

    def abort(self) -> None:
        """Close and delete the partial files (nothing is published)."""
        for path, f in self._files.items():
            f.close()
            try:
                os.remove(path + ".partial")
            except FileNotFoundError:
                pass
        self._files = {}

    def __enter__(self) -> "SplitBinaryWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- validation helpers
    def _check_label(self, label: np.ndarray) -> bytes:
        chunk = self.label_chunk
        if label.dtype == np.bool_:
            return label.tobytes()
        if not np.issubdtype(label.dtype, np.number):
            raise DataError(f"labels must be numbers, got dtype {label.dtype}", chunk.path, chunk.features[0])
        bad = np.flatnonzero((label != 0) & (label != 1))
        if bad.size:
            r = int(bad[0])
            raise DataError(f"label {label[r]:g} is not 0 or 1", chunk.path, chunk.features[0], self.rows_written + r)
        return label.astype(np.bool_).tobytes()

    def _check_numerical(self, numerical, n: int) -> bytes:
        chunk = self.numerical_chunk
        if chunk is None:
            return b""
        numerical = np.asarray(numerical)
        width = len(chunk.features)
        if numerical.shape != (n, width):
            raise DataError(f"numerical chunk has shape {numerical.shape}, expected ({n}, {width})", chunk.path)
        if not np.issubdtype(numerical.dtype, np.floating) and not np.issubdtype(numerical.dtype, np.integer):
            raise DataError(f"numerical values must be numbers, got dtype {numerical.dtype}", chunk.path)
        with np.errstate(over="ignore", invalid="ignore"):
            stored = numerical.astype(chunk.dtype)
            ok = np.isfinite(numerical) & np.isfinite(stored)
        if not ok.all():
            r, c = (int(i) for i in np.argwhere(~ok)[0])
            value = numerical[r, c]
            limit = float(np.finfo(chunk.dtype).max)
            why = "is NaN or inf" if not np.isfinite(value) else f"overflows {chunk.dtype.name} (max {limit:g})"
            raise DataError(f"numerical value {value!r} {why}", chunk.path, chunk.features[c], self.rows_written + r)
        return np.ascontiguousarray(stored).tobytes()

    def _check_categorical(self, categorical, n: int) -> list[bytes]:
        tables = len(self.categorical_chunks)
        if isinstance(categorical, np.ndarray):
            if categorical.shape != (n, tables):
                raise DataError(f"categorical chunk has shape {categorical.shape}, expected ({n}, {tables})",
                                self.categorical_chunks[0].path if tables else None)
            columns = [categorical[:, j] for j in range(tables)]
        else:
            columns = [np.asarray(c) for c in categorical]
            if len(columns) != tables:
                raise DataError(f"got {len(columns)} categorical columns, expected {tables}")
        out = []
        for chunk, card, col in zip(self.categorical_chunks, self.cardinalities, columns):
            if col.shape != (n,):
                raise DataError(f"id column has shape {col.shape}, expected ({n},)", chunk.path, chunk.features[0])
            if not np.issubdtype(col.dtype, np.integer):
                raise DataError(f"ids must be integers, got dtype {col.dtype}", chunk.path, chunk.features[0])
            if n and (col.min() < 0 or col.max() >= card):
                r = int(np.flatnonzero((col < 0) | (col >= card))[0])
                raise DataError(f"id {int(col[r])} is outside [0, {card})", chunk.path, chunk.features[0],
                                self.rows_written + r)
            out.append(col.astype(chunk.dtype).tobytes())
        return out


def write_split_binary(out_dir: str, spec: FeatureSpec, mapping: str, label, numerical, categorical) -> int:
    """Write one whole mapping in a single call (tests, small datasets)."""
    with SplitBinaryWriter(out_dir, spec, mapping) as writer:
        writer.write(label, numerical, categorical)
    return writer.rows_written


# ====================================================================== reader
def _map_file(chunk: BinaryChunk, rows: int) -> np.ndarray:
    """Read-only memory map of a whole file as a flat array (zero-length files give an empty array)."""
    if rows == 0:
        return decode.empty_mapping(chunk.dtype)
    with open(chunk.path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=chunk.dtype)


def rank_slice(batch_rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """[begin, end) of `rank`'s contiguous share of a batch of `batch_rows` rows, split as evenly as
    possible (the first `batch_rows % world_size` ranks get one row more; a rank may get 0 rows)."""
    base, extra = divmod(batch_rows, world_size)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def batches_ahead(prefetch: int, workers: int) -> int:
    """Batches a prefetch may have taken and not yet handed to the consumer: `prefetch` finished
    ones waiting, plus one per worker in progress (when the consumer is slow, all may be finished)."""
    return prefetch + workers if prefetch else 0


def pooled_output_sets(prefetch: int, threads: int) -> int:
    """Output array sets a reader keeps for reuse: those its prefetch may have taken, plus the
    consumer's batch and the one it just let go."""
    return batches_ahead(prefetch, threads) + 2


class MappedFiles:
    """A split-binary mapping's files, memory-mapped read-only and grouped for the compiled kernels.

    Shared by the batch reader (decode) and the start-up value check (no decode), so both name a bad
    value the same way.
    """

    def __init__(self, spec: FeatureSpec, mapping: str):
        self.mapping = mapping
        self.chunks = spec.binary_chunks(mapping)
        self.num_rows = spec.num_rows(mapping)
        self.label_chunk, self.numerical_chunk, self.categorical_chunks = split_by_channel(self.chunks)
        self.num_numerical = len(self.numerical_chunk.features) if self.numerical_chunk else 0
        self.num_categorical = len(self.categorical_chunks)
        numerical = None if self.numerical_chunk is None else _map_file(self.numerical_chunk, self.num_rows)
        self.columns = [_map_file(c, self.num_rows) for c in self.categorical_chunks]
        self.sources = decode.row_sources(_map_file(self.label_chunk, self.num_rows), numerical, self.num_numerical,
                                          self.columns, spec.cardinalities)

    def check_rows(self, begin: int, end: int, threads: int = 1,
                   block_rows: int = decode.CHECK_BLOCK_ROWS) -> tuple[int, tuple[int, int, int]]:
        """(positive labels, (kind, column, row) of the earliest bad value or decode.NO_ERROR) of rows
        [begin, end), checked without decoding (see `decode.check_rows`)."""
        return decode.check_rows(self.sources, begin, end, threads, block_rows)

    def raise_for(self, found: tuple[int, int, int]) -> None:
        """Raise the DataError of a (kind, column, row) a check or decode reported, if any."""
        if found[0] >= 0:
            raise self.bad_value(*found)

    def bad_value(self, kind: int, column: int, row: int) -> DataError:
        """The error naming file, feature and row of a value the decode or the check rejected."""
        if kind == decode.LABEL:
            chunk, why = self.label_chunk, f"label byte {int(self.sources.label_src[row])} is not 0 or 1"
        elif kind == decode.NUMERICAL:
            chunk = self.numerical_chunk
            at = row * self.num_numerical + column
            why = f"numerical value {self.sources.numerical_src[at:at + 1].view(chunk.dtype)[0]} is NaN or inf"
        else:
            chunk = self.categorical_chunks[column]
            why = f"id {int(self.columns[column][row])} is outside [0, {self.sources.cards[column]})"
        return DataError(why, chunk.path, chunk.features[column if kind == decode.NUMERICAL else 0], row)


class BatchReader:
    """Iterates one mapping in global batches, yielding this rank's contiguous slice of each.

    - `partial_batch="keep"` yields the last, smaller global batch (split as evenly as possible over
      the ranks); `"drop"` skips it and reports the skipped rows in `rows_skipped`. Nothing else is
      ever skipped.
    - `len(reader)` is the number of global batches in an epoch. The first iteration starts at
      `start_batch` (resume mid-epoch), later iterations at 0; `iter_from(i)` starts anywhere.
    - `threads=k` decode threads. With `prefetch` > 0, k background threads each decode whole
      batches ahead of the consumer (at most `prefetch` + k decoded or being decoded); with
      `prefetch=0`, each batch is decoded when asked for, its rows split into k ranges on numba's
      threads (one parallel region per batch). Whole batches per thread suit prefetching: no thread waits for
      another at a barrier, so a thread the OS preempts (the consumer wakes on the same cores)
      delays only its own batch.
    - Opening checks the files (exist, whole records, equal row counts); every decoded row is
      checked (label 0/1, numericals finite, ids in [0, cardinality)) inside the conversion loop,
      so the checks are always on; errors name the file, the feature and the row. `check_all()`
      checks a whole mapping without decoding (the trainer's start-up check: `dlrm.data.validate`).
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
        self._buffers = _BatchBuffers(self.num_numerical, self.num_categorical,
                                      slots=pooled_output_sets(prefetch, threads))

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
        label, numerical, categorical = self._buffers.take(end - begin)
        parts = max(1, min(threads, (end - begin) // MIN_ROWS_PER_THREAD))
        kind, column, row = decode.decode_rows(self.files.sources, begin, parts, self._scratch(parts), label,
                                               numerical.reshape(-1).view(np.uint32), categorical)
        if kind >= 0:
            raise self.files.bad_value(kind, column, begin + row)
        return Batch(numerical, categorical, label, global_rows, index, begin)

    def _scratch(self, parts: int) -> np.ndarray:
        """Per-thread scratch for the decode (a reader may decode on its prefetch threads and the caller's)."""
        scratch = getattr(self._thread_local, "scratch", None)
        if scratch is None or scratch.shape[0] < parts:
            scratch = decode.new_scratch(parts, self.num_categorical)
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
        return _prefetched(whole_batch, range(first_batch, self.num_batches), self.prefetch, self.threads)

    def check_all(self) -> int:
        """Check every value of the mapping (all ranks' rows, partial batch included) on `threads`
        threads, without decoding; raises the DataError of the earliest bad row, else returns the
        number of rows checked."""
        self.files.raise_for(self.files.check_rows(0, self.num_rows, self.threads)[1])
        return self.num_rows


class _BatchBuffers:
    """Output arrays for decoded batches, reused once nothing outside this pool refers to them.

    Reusing a few sets of arrays keeps them in the CPU cache (a fresh 10 MB batch per step misses
    it and costs memory bandwidth). A set is reused only when its reference counts show that only
    the pool holds it: a `Batch` still held by the consumer, a view or a slice of its arrays, or a
    tensor sharing their memory all keep it out of reuse, so a yielded batch is never overwritten
    (code keeping only a raw pointer, e.g. `arr.ctypes.data`, must keep the array too).
    When every set is in use, a fresh set replaces the oldest one in the pool (whoever holds the
    old set keeps it; the pool forgets it), so batches kept for long never starve the pool.
    """

    _POOLED_REFS = 2  # the pool's tuple + getrefcount's argument

    def __init__(self, num_numerical: int, num_categorical: int, slots: int):
        self._shapes = (num_numerical, num_categorical)
        self._slots = slots
        self._sets: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._oldest = 0
        self._lock = threading.Lock()

    def _new(self, n: int):
        width_numerical, width_categorical = self._shapes
        return (np.empty(n, dtype=np.float32), np.empty((n, width_numerical), dtype=np.float32),
                np.empty((n, width_categorical), dtype=np.int32))

    def _unused(self, arrays) -> bool:
        # index, don't iterate: a loop variable would add a reference of its own
        return (sys.getrefcount(arrays[0]) == self._POOLED_REFS and sys.getrefcount(arrays[1]) == self._POOLED_REFS
                and sys.getrefcount(arrays[2]) == self._POOLED_REFS)

    def take(self, n: int):
        """Arrays (label [n], numerical [n, F], categorical [n, T]) that no one else refers to."""
        # The returned tuple is built under the lock: its references mark the set as taken before
        # another thread (two prefetch workers) can look at the reference counts.
        with self._lock:
            for arrays in self._sets:
                if arrays[0].shape[0] == n and self._unused(arrays):
                    return arrays[0], arrays[1], arrays[2]
            arrays = self._new(n)
            if len(self._sets) < self._slots:
                self._sets.append(arrays)
            elif self._slots:
                self._sets[self._oldest] = arrays
                self._oldest = (self._oldest + 1) % self._slots
            return arrays[0], arrays[1], arrays[2]


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _prefetched(produce, indices: range, prefetch: int, workers: int) -> Iterator[Batch]:
    """Run `produce(i)` for `indices` on `workers` background threads, yield results in order.

    Each worker takes the next index and produces that whole batch, so workers never wait for each
    other (a worker the OS preempts delays only its own batch). At most `batches_ahead(prefetch,
    workers)` batches are taken and not yet handed to the consumer. An error stays in its batch's
    place: the batches before it are yielded, then it is raised. Stops the workers when the
    consumer stops early (generator close / garbage collection).
    """
    ahead = batches_ahead(prefetch, workers)
    ready: dict[int, object] = {}  # position in `indices` -> batch or _Failure
    state = threading.Condition()
    taken = handed = 0  # positions taken by workers / handed to the consumer
    stop = False

    def work() -> None:
        nonlocal taken, stop
        while True:
            with state:
                while not stop and taken < len(indices) and taken - handed >= ahead:
                    state.wait()
                if stop or taken >= len(indices):
                    return
                position = taken
                taken += 1
            try:
                item = produce(indices[position])
            except BaseException as error:  # handed to the consumer, raised there
                item = _Failure(error)
            with state:
                ready[position] = item
                stop = stop or isinstance(item, _Failure)  # nothing after a failure is yielded
                state.notify_all()
            item = None  # the consumer may drop it while this worker decodes the next one

    def consume() -> Iterator[Batch]:
        nonlocal handed, stop
        # the threads start on the first next(), so an iterator that is never used leaks nothing
        worker_threads = [threading.Thread(target=work, daemon=True, name=f"batch-prefetch-{k}")
                          for k in range(workers)]
        try:
            for thread in worker_threads:
                thread.start()
            for position in range(len(indices)):
                with state:
                    while position not in ready:
                        state.wait()
                    item = ready.pop(position)
                    handed = position + 1
                    state.notify_all()
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            with state:
                stop = True
                state.notify_all()
            for thread in worker_threads:
                if thread.is_alive() and thread is not threading.current_thread():  # GC may close us there
                    thread.join(timeout=10)

    return consume()
