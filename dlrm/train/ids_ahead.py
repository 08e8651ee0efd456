"""The training batches, with each batch's id all-to-all run during the step before where the backend can.

A batch's categorical ids do not depend on the model, so the all-to-all that sends them to the ranks
owning their tables (the first of the hybrid-parallel lookup's two, `dlrm.embedding.distributed`) can
run before the step that needs them. On the MPI backend (`ProcessGroup.starts_alltoall_early`) with
sharded tables, `StepBatches` posts the exchange of batch k+1 as step k starts and finishes it as step k
ends: its messages move while the ranks are inside step k's collectives, and step k+1's graph takes the
received ids as an input instead of exchanging them itself. Elsewhere (one process, Horovod, replicated
tables only, `--exchange_ids_in_step`) the exchange stays inside the step.

Per step k, on every rank in the same order (so the exchanges match across ranks):
    next()                   batch k (its ids already received); the caller's stop agreement follows
    with next_ids_ahead():   read batch k+1 and post its exchange; step k; finish the exchange
An exchange is therefore in flight only during a step: evaluations, checkpoints and every way of
stopping between steps find none. A rank that cannot read batch k+1 (or whose ids are out of range)
posts an empty exchange in its place, so every rank's exchange still completes, and raises that error
from the next `next()`: the stop agreement then stops every rank after step k, exactly as when the
error is found just before step k+1.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Optional, Tuple

import numpy as np
import tensorflow as tf

from dlrm.data.reader.batch import Batch
from dlrm.dist import StartedAlltoall
from dlrm.embedding.distributed import DistributedEmbedding
from dlrm.train.build import Parts

EXCHANGE_NAME = "ids_ahead"
AHEAD_MESSAGE = ("each batch's ids travel to their tables' owners during the step before it "
                 "(--exchange_ids_in_step: inside their own)")


def exchanges_ids_ahead(parts: Parts) -> bool:
    """Whether training runs the id all-to-all one step ahead (see the module docstring)."""
    embeddings = parts.embeddings
    return (not parts.config.train.exchange_ids_in_step and parts.group.starts_alltoall_early
            and isinstance(embeddings, DistributedEmbedding) and embeddings.exchanges_ids)


class StepBatches:
    """Iterator of (batch, exchanged) over at most `steps` batches (None: no end): `exchanged` is (received
    ids, received splits) for the train step when the ids travel ahead, else (). Run each step inside
    `next_ids_ahead()`."""

    def __init__(self, batches: Iterator[Batch], parts: Parts, steps: Optional[int] = None):
        self._batches = batches
        self._ahead = exchanges_ids_ahead(parts)
        self._group = parts.group
        self._world = parts.group.size
        self._left = steps  # batches this iterator may still read
        # (the batch read ahead or None, its started exchange, the read error or None)
        self._pending: Optional[Tuple[Optional[Batch], StartedAlltoall, Optional[BaseException]]] = None
        if self._ahead:
            model, embeddings = parts.model, parts.embeddings
            assert isinstance(embeddings, DistributedEmbedding)
            self._ids_to_send = tf.function(
                lambda categorical: embeddings.ids_to_send(model.embedding_ids(categorical)),
                autograph=False, input_signature=model.input_signature[1:2])

    @property
    def ids_ahead(self) -> bool:
        """Whether the ids travel ahead: the train step then takes `exchanged` as its last inputs."""
        return self._ahead

    def __iter__(self) -> "StepBatches":
        return self

    def __next__(self) -> Tuple[Batch, tuple]:
        if not self._ahead:
            return self._read(), ()
        if self._pending is None:  # the first step: nothing was read ahead
            self._read_ahead()
        pending, self._pending = self._pending, None
        if pending is None:
            raise StopIteration
        batch, started, error = pending
        received = started.wait()  # finished at the end of the step before (the first step: now)
        if error is not None:
            raise error
        assert batch is not None
        return batch, received

    @contextlib.contextmanager
    def next_ids_ahead(self) -> Iterator[None]:
        """Around one step: the next batch's ids travel while it runs (nothing when they travel inside
        steps, or after the last batch). A step that raises leaves the exchange to the job's end."""
        self._read_ahead()
        yield
        if self._pending is not None:
            self._pending[1].wait()

    def _read(self) -> Batch:
        if self._left is not None:
            if self._left <= 0:
                raise StopIteration
            self._left -= 1
        return next(self._batches)

    def _read_ahead(self) -> None:
        """Read the next batch and post its id exchange (a read error is kept for `next()`)."""
        if not self._ahead or self._pending is not None:
            return
        batch, error = None, None
        try:
            batch = self._read()
            send, splits = (tensor.numpy() for tensor in self._ids_to_send(batch.categorical))
        except StopIteration:
            return
        except Exception as read_error:  # noqa: BLE001 - raised by the next `next()`, after the exchange
            error, send, splits = read_error, np.zeros(0, np.int32), np.zeros(self._world, np.int32)
        self._pending = (batch, self._group.start_alltoall(send, splits, EXCHANGE_NAME), error)

    def close(self) -> None:
        close = getattr(self._batches, "close", None)
        if close:
            close()
