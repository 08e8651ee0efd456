"""Decoding batches ahead of the consumer on a few threads, handed over in order.

Each thread produces whole batches, so no thread waits for another (a thread the OS preempts delays
only its own batch). The bound on batches decoded ahead is what sizes the reader's pool of output
arrays (`dlrm.data.reader.batch.pooled_output_sets`).
"""
from __future__ import annotations

import collections
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator, TypeVar

Item = TypeVar("Item")


def batches_ahead(prefetch: int, workers: int) -> int:
    """Batches a prefetch may have taken and not yet handed to the consumer: `prefetch` finished
    ones waiting, plus one per worker in progress (when the consumer is slow, all may be finished)."""
    return prefetch + workers if prefetch else 0


def prefetched(produce: Callable[[int], Item], indices: range, prefetch: int, workers: int) -> Iterator[Item]:
    """Run `produce(i)` for `indices` on `workers` background threads, yield results in order.

    At most `batches_ahead(prefetch, workers)` items are submitted and not yet handed over. An error
    stays in its item's place: the items before it are yielded, then it is raised. The threads start
    on the first next(), and stop when the iteration ends, fails or is closed early (generator close
    or garbage collection).
    """
    ahead = batches_ahead(prefetch, workers)
    pool_threads: set[int] = set()  # a generator collected on one of them must not wait for itself
    pool = ThreadPoolExecutor(workers, thread_name_prefix="batch-prefetch",
                              initializer=lambda: pool_threads.add(threading.get_ident()))
    pending: collections.deque[Future] = collections.deque()
    upcoming = iter(indices)

    def submit_next() -> None:
        index = next(upcoming, None)
        if index is not None:
            pending.append(pool.submit(produce, index))

    try:
        _start_every_thread(pool, workers)
        for _ in range(ahead):
            submit_next()
        while pending:
            item = pending.popleft().result()  # an error in produce() is raised here, at its item
            submit_next()
            yield item
    finally:
        pool.shutdown(wait=threading.get_ident() not in pool_threads, cancel_futures=True)


def _start_every_thread(pool: ThreadPoolExecutor, workers: int) -> None:
    """Start all `workers` threads of the pool now: an executor adds a thread only when none is idle, so
    quick first items would leave it narrower than asked. Each thread waits for the others before it
    takes an item; the caller does not wait."""
    everyone = threading.Barrier(workers)
    try:
        for _ in range(workers):
            pool.submit(everyone.wait)
    except BaseException:
        everyone.abort()  # release the threads that did start: the others never will
        raise
