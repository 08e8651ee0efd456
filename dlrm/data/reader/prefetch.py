"""Decoding batches ahead of the consumer on a few threads, handed over in order.

Each thread produces whole batches, so no thread waits for another (a thread the OS preempts delays
only its own batch). The bound on batches decoded ahead is what sizes the reader's pool of output
arrays (`dlrm.data.reader.batch.pooled_output_sets`).
"""
from __future__ import annotations

import threading
from typing import Callable, Iterator, TypeVar, Union

Item = TypeVar("Item")


def batches_ahead(prefetch: int, workers: int) -> int:
    """Batches a prefetch may have taken and not yet handed to the consumer: `prefetch` finished
    ones waiting, plus one per worker in progress (when the consumer is slow, all may be finished)."""
    return prefetch + workers if prefetch else 0


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def prefetched(produce: Callable[[int], Item], indices: range, prefetch: int, workers: int) -> Iterator[Item]:
    """Run `produce(i)` for `indices` on `workers` background threads, yield results in order.

    Each worker produces whole batches, so workers never wait for each other (a worker the OS preempts
    delays only its own batch). At most `batches_ahead(prefetch, workers)` batches are taken and not
    yet handed over. An error stays in its batch's place: the batches before it are yielded, then it
    is raised. Stops the workers when the consumer stops early (generator close / garbage collection).
    """
    ahead = batches_ahead(prefetch, workers)
    ready: dict[int, Union[Item, _Failure]] = {}  # position in `indices` -> batch or _Failure
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
                item: Union[Item, _Failure] = produce(indices[position])
            except BaseException as error:  # handed to the consumer, raised there
                item = _Failure(error)
            with state:
                ready[position] = item
                stop = stop or isinstance(item, _Failure)  # nothing after a failure is yielded
                state.notify_all()

    def consume() -> Iterator[Item]:
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
