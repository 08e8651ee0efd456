"""Per-rank slicing: every row exactly once for world sizes 1..4, partial-batch rules, resume;
decoding on several threads."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from dlrm.data.reader.reader import BatchReader, rank_slice
from tests.support import ROOT
from tests.support.datasets import make_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("slicing"), 103)


def rows_seen(spec, world_size, global_batch, partial_batch="keep", start_batch=0):
    """{rank: list of its Batch objects} for every rank, plus each reader."""
    seen, readers = {}, []
    for rank in range(world_size):
        reader = BatchReader(spec, "train", global_batch, rank=rank, world_size=world_size,
                             partial_batch=partial_batch, start_batch=start_batch)
        readers.append(reader)
        seen[rank] = list(reader)
    return seen, readers


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("global_batch", [8, 10, 103, 200])
def test_every_row_exactly_once(dataset, world_size, global_batch):
    spec, data = dataset
    _, _, categorical = data["train"]
    seen, readers = rows_seen(spec, world_size, global_batch)
    num_batches = -(-103 // global_batch)
    assert all(len(r) == num_batches for r in readers)
    covered = []
    for index in range(num_batches):
        batch_rows = min(global_batch, 103 - index * global_batch)
        sizes = []
        for rank in range(world_size):
            batch = seen[rank][index]
            assert batch.index == index and batch.global_rows == batch_rows
            n = batch.label.shape[0]
            sizes.append(n)
            rows = np.arange(batch.first_row, batch.first_row + n)
            np.testing.assert_array_equal(batch.categorical, categorical[rows])  # contiguous slice, right rows
            covered.extend(rows.tolist())
        assert sum(sizes) == batch_rows and max(sizes) - min(sizes) <= 1  # as even as possible
        assert sizes == sorted(sizes, reverse=True)  # ranks in order: rank 0's slice first
    assert sorted(covered) == list(range(103)) and len(covered) == 103


def test_a_rank_may_get_no_rows():
    assert [rank_slice(2, r, 4) for r in range(4)] == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert [rank_slice(10, r, 3) for r in range(3)] == [(0, 4), (4, 7), (7, 10)]


def test_partial_batch_keep_and_drop(dataset):
    spec, _ = dataset
    keep = BatchReader(spec, "train", 10, partial_batch="keep")
    drop = BatchReader(spec, "train", 10, partial_batch="drop")
    assert (len(keep), keep.rows_skipped) == (11, 0)
    assert (len(drop), drop.rows_skipped) == (10, 3)
    assert [b.label.size for b in keep][-1] == 3
    dropped = list(drop)
    assert all(b.label.size == 10 for b in dropped) and len(dropped) == 10
    exact = BatchReader(spec, "train", 103, partial_batch="drop")
    assert (len(exact), exact.rows_skipped) == (1, 0)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_start_batch_resumes_with_the_remaining_rows(dataset, world_size):
    spec, _ = dataset
    seen, readers = rows_seen(spec, world_size, 8, start_batch=5)
    covered = sorted(r for rank in seen for b in seen[rank] for r in range(b.first_row, b.first_row + b.label.size))
    assert covered == list(range(40, 103))
    assert [b.index for b in seen[0]] == list(range(5, 13))
    # the next epoch (second iteration of the same reader) starts at batch 0
    assert [b.index for b in readers[0]][0] == 0


def test_prefetch_threads_preserve_order(dataset):
    spec, _ = dataset
    inline = list(BatchReader(spec, "train", 7, prefetch=0))
    threaded = list(BatchReader(spec, "train", 7, prefetch=5, threads=3))
    assert [b.index for b in threaded] == list(range(15))
    for a, b in zip(inline, threaded):
        np.testing.assert_array_equal(a.categorical, b.categorical)
        np.testing.assert_array_equal(a.numerical, b.numerical)


def test_stopping_early_stops_the_prefetch_threads(dataset):
    spec, _ = dataset
    before = threading.active_count()
    iterator = BatchReader(spec, "train", 4, prefetch=2, threads=2).iter_from(0)
    next(iterator)
    assert threading.active_count() == before + 2  # both workers started (26 batches: neither is done)
    iterator.close()
    assert threading.active_count() == before


def test_argument_checks(dataset):
    spec, _ = dataset
    for kwargs, message in [({"rank": 2, "world_size": 2}, "rank"), ({"partial_batch": "pad"}, "partial_batch"),
                            ({"start_batch": 12}, "start_batch"), ({"prefetch": -1}, "prefetch")]:
        with pytest.raises(ValueError, match=message):
            BatchReader(spec, "train", 10, **kwargs)
    with pytest.raises(ValueError, match="global_batch_size"):
        BatchReader(spec, "train", 0)


def test_rows_split_over_decode_threads(dataset, monkeypatch):
    """Inline, threads=k splits each batch's rows between k threads; the result equals a one-thread decode."""
    from dlrm.data.reader import reader as reader_module

    monkeypatch.setattr(reader_module, "MIN_ROWS_PER_THREAD", 4)  # split even these small batches
    spec, _ = dataset
    inline = list(BatchReader(spec, "train", 50, prefetch=0))
    split = list(BatchReader(spec, "train", 50, prefetch=0, threads=3))
    assert [b.index for b in split] == [0, 1, 2]
    for a, b in zip(inline, split):
        np.testing.assert_array_equal(a.categorical, b.categorical)
        np.testing.assert_array_equal(a.numerical.view(np.uint32), b.numerical.view(np.uint32))
        np.testing.assert_array_equal(a.label, b.label)


@pytest.mark.parametrize("threads", [1, 3])
def test_held_batches_are_never_overwritten(dataset, threads):
    """Output arrays are reused only once released: held batches and views keep theirs (with three
    prefetch workers taking sets from the pool at once, too)."""
    spec, _ = dataset
    reader = BatchReader(spec, "train", 4, prefetch=2, threads=threads)
    expected = [reader.read_batch(i).categorical.copy() for i in range(len(reader))]
    held, views, addresses = [], [], set()
    for batch in reader:
        addresses.add(batch.categorical.ctypes.data)
        if batch.index % 3 == 0:
            held.append(batch)
        elif batch.index % 3 == 1:
            views.append((batch.index, batch.categorical[1:]))
        else:
            batch.release()
    for batch in held:
        np.testing.assert_array_equal(batch.categorical, expected[batch.index])
    for index, view in views:
        np.testing.assert_array_equal(view, expected[index][1:])
    assert len(addresses) < len(reader)  # the batches released (index % 3 == 2) gave their arrays back
    # released batches are reused: inline, one set serves every batch (+1 for the smaller last batch)
    inline = BatchReader(spec, "train", 4, prefetch=0)
    addresses = set()
    for batch in inline:
        addresses.add(batch.categorical.ctypes.data)
        batch.release()
    assert len(addresses) <= 2 < len(inline)


def test_bad_ids_in_chunks_on_several_threads_report_the_earliest_row(tmp_path, monkeypatch):
    """With a batch's rows on several decode threads, the error names the earliest bad row."""
    from dlrm.data.format.errors import DataError
    from dlrm.data.reader import reader as reader_module

    monkeypatch.setattr(reader_module, "MIN_ROWS_PER_THREAD", 40)  # 120 rows, 3 threads: 40 rows each
    spec, _ = make_dataset(tmp_path, 120)
    path = tmp_path / "train" / "cat_7.bin"  # cardinality 2
    ids = np.fromfile(path, dtype=spec.dtype("cat_7"))
    ids[110], ids[70] = 2, 5  # in the last chunk and in the middle one
    ids.tofile(path)
    with pytest.raises(DataError) as caught:
        BatchReader(spec, "train", 120, prefetch=0, threads=3).read_batch(0)
    assert (caught.value.file, caught.value.feature, caught.value.row) == (str(path), "cat_7", 70)


class _OutOfOrder:
    """A `produce` for `prefetched` whose workers finish out of order: item 0 finishes only after item 1
    (with three workers both are in flight at once), whatever the threads' timing; item `fail_at` raises."""

    def __init__(self, count: int, fail_at: int = -1):
        self.second_done = threading.Event()
        self.started: list[int] = []
        self.finished: list[int] = []
        self.fail_at = fail_at
        self.lock = threading.Lock()

    def __call__(self, i: int) -> int:
        with self.lock:
            self.started.append(i)
        if i == 0:
            assert self.second_done.wait(timeout=60), "item 1 was never produced beside item 0"
        with self.lock:
            self.finished.append(i)
        if i == 1:
            self.second_done.set()
        if i == self.fail_at:
            raise ValueError(f"item {i}")
        return i


def test_prefetched_yields_in_order_what_workers_finish_out_of_order():
    from dlrm.data.reader.prefetch import prefetched

    produce = _OutOfOrder(12)
    assert list(prefetched(produce, range(12), prefetch=2, workers=3)) == list(range(12))
    assert produce.finished != sorted(produce.finished)  # the workers really finished out of order


def test_prefetched_raises_at_the_failed_item_and_takes_nothing_past_the_bound():
    from dlrm.data.reader.prefetch import batches_ahead, prefetched

    before = threading.active_count()
    produce = _OutOfOrder(40, fail_at=5)
    got = []
    with pytest.raises(ValueError, match="item 5"):
        for item in prefetched(produce, range(40), prefetch=2, workers=3):
            got.append(item)
    assert got == [0, 1, 2, 3, 4]
    # at most 5 handed over + the bound were ever taken, and the failure stopped the workers
    assert max(produce.started) < 5 + batches_ahead(2, 3)
    assert threading.active_count() == before


def test_prefetch_fills_exactly_its_bound_and_closing_stops_the_waiting_workers():
    from dlrm.data.reader.prefetch import batches_ahead, prefetched

    before = threading.active_count()
    started = []
    iterator = prefetched(lambda i: started.append(i) or i, range(100), prefetch=1, workers=3)
    assert next(iterator) == 0
    bound = 1 + batches_ahead(1, 3)  # 1 handed over + 4 ahead
    deadline = time.monotonic() + 60
    while len(started) < bound and time.monotonic() < deadline:  # the workers fill the bound...
        time.sleep(0.01)
    time.sleep(0.2)  # ...then wait for the consumer: nothing more is taken
    assert sorted(started) == list(range(bound))
    assert threading.active_count() == before + 3
    iterator.close()
    assert threading.active_count() == before


def test_prefetch_workers_yield_every_batch_before_a_bad_one_then_raise(tmp_path):
    """Three workers decode batches out of order; a bad id in batch 6 (of 10) still comes after
    batches 0..5, in order, and the workers stop."""
    from dlrm.data.format.errors import DataError

    spec, _ = make_dataset(tmp_path, 100)
    path = tmp_path / "train" / "cat_7.bin"
    ids = np.fromfile(path, dtype=spec.dtype("cat_7"))
    ids[63] = 9  # cardinality 2; batch 6 holds rows 60..69
    ids.tofile(path)
    before = threading.active_count()
    seen = []
    with pytest.raises(DataError) as caught:
        for batch in BatchReader(spec, "train", 10, prefetch=3, threads=3):
            seen.append(batch.index)
    assert seen == [0, 1, 2, 3, 4, 5]
    assert (caught.value.feature, caught.value.row) == ("cat_7", 63)
    assert threading.active_count() == before


@pytest.mark.parametrize("prefetch", [0, 2])
def test_two_readers_decoding_on_several_threads_at_once(tmp_path, monkeypatch, prefetch):
    """Two readers (say training and evaluation) decoding at the same time, each on two threads
    (inline: each batch split over numba's threads; prefetching: two workers each): both read
    exactly what a one-thread reader reads."""
    from dlrm.data.reader import reader as reader_module

    monkeypatch.setattr(reader_module, "MIN_ROWS_PER_THREAD", 8)
    spec, data = make_dataset(tmp_path, 3000)
    _, numerical, categorical = data["train"]
    results, errors = {}, []

    def read(name: int) -> None:
        try:
            reader = BatchReader(spec, "train", 100 + 37 * name, prefetch=prefetch, threads=2)
            results[name] = [(b.numerical.copy(), b.categorical.copy()) for _ in range(4) for b in reader]
        except BaseException as error:  # re-raised below, in the test's thread
            errors.append(error)

    readers = [threading.Thread(target=read, args=(name,)) for name in range(2)]
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join(timeout=120)
    assert not errors and sorted(results) == [0, 1]
    for name, batches in results.items():
        assert len(batches) == 4 * -(-3000 // (100 + 37 * name))
        np.testing.assert_array_equal(np.concatenate([c for _, c in batches]), np.tile(categorical, (4, 1)))
        got = np.concatenate([n for n, _ in batches]).view(np.uint32)
        np.testing.assert_array_equal(got, np.tile(numerical.astype(np.float32), (4, 1)).view(np.uint32))


def test_decode_threads_refuse_numbas_unsafe_threading_layer():
    """numba's workqueue layer aborts the process when two threads launch kernels at once, so several
    decode threads refuse it with a clear error; the default picks a thread-safe layer."""
    code = ("from dlrm.data.reader import decode\ndecode.check_threading_layer()\n"
            "import numba\nprint(numba.threading_layer())")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    for layer in ("workqueue", None):
        if layer:
            env["NUMBA_THREADING_LAYER"] = layer
        else:
            env.pop("NUMBA_THREADING_LAYER")
        run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=300)
        if layer:
            assert run.returncode != 0 and "workqueue threading layer is not thread-safe" in run.stderr, run.stderr
        else:
            assert run.returncode == 0 and run.stdout.split()[-1] in ("omp", "tbb"), run.stderr[-2000:]
