"""The backend-independent process group: rank, size, the collectives' interface, and what is built on them.

A backend (`horovod.py`, `mpi.py`) implements the primitives for a world of two or more ranks; this class
answers every collective of a world of one itself, and builds the rest on the primitives: agreeing on
Python values (`allgather_object`, `agree`), the averaging tape and its fixed buffers. `ProcessGroup`
itself, with size 1, is the world of one that `single_process()` returns.
"""
from __future__ import annotations

import contextlib
import json
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from dlrm.dist.launcher import LauncherWorld


@dataclass(frozen=True)
class Failure:
    """One rank's report in `ProcessGroup.agree`."""

    rank: int
    host: str
    message: str


@dataclass
class CollectiveTime:
    """Wall time one rank spent in one kind of collective: `seconds` in all, of which `waiting` until every
    peer's message had begun to arrive (the peers were still computing; of a send only, such as a broadcast's
    root: until the peers took it). `calls`: message exchanges (an allreduce is two)."""

    calls: int = 0
    seconds: float = 0.0
    waiting: float = 0.0


class StartedAlltoall:
    """An all-to-all of numpy rows posted ahead of its use (`ProcessGroup.start_alltoall`); `wait()` gives
    (received rows, received splits), like `alltoall`, once every peer's rows are in."""

    def __init__(self, finish: Callable[[], tuple]):
        self._finish: Optional[Callable[[], tuple]] = finish
        self._result: tuple = ()

    def wait(self) -> tuple:
        if self._finish is not None:
            self._result, self._finish = self._finish(), None
        return self._result


class ProcessGroup:
    """Rank, world size and the collectives of one run; the only handle on Horovod or MPI.

    Created once (`dist.start()` or `dist.single_process()`) and passed explicitly. Every collective is
    also correct with one rank, where none of them calls the backend.
    """

    backend = "none"  # "horovod", "mpi" in the backends' subclasses
    # Whether `start_alltoall` posts the messages and returns at once (the MPI backend); Horovod's TensorFlow
    # all-to-all has no start/finish split.
    starts_alltoall_early = False
    # Whether the backend's collectives on Python values (`barrier`, `allgather_object`, `broadcast_object`)
    # are TensorFlow ops (Horovod's): then TensorFlow is configured before the first of them. The MPI
    # backend's are numpy, so a run's start-up checks need no TensorFlow there.
    needs_tensorflow = False

    def __init__(self, rank: int, size: int, local_rank: int, local_size: int, launcher: LauncherWorld):
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.launcher = launcher

    def __repr__(self) -> str:
        return f"ProcessGroup(rank={self.rank}, size={self.size}, backend={self.backend})"

    def is_peer_failure(self, error: BaseException) -> bool:
        """True if `error` is the backend reporting that another rank died or stalled (not a bug here)."""
        return False

    def leave_after_error(self, reported: bool, grace_seconds: float) -> None:
        """The last thing a rank does after a user error, before it exits.

        A launcher (horovodrun, mpirun) ends every rank as soon as one exits with an error, so the rank
        that reported the error (`reported`) must exit first: a rank that reported nothing waits
        `grace_seconds` (on the MPI backend after finalizing, whose wait would otherwise hold the
        reporting rank as long).
        """
        if not reported:
            time.sleep(grace_seconds)

    def collective_seconds(self) -> Optional[Dict[str, CollectiveTime]]:
        """This rank's time in collectives so far, by kind ("alltoall", "allreduce", "allgather",
        "broadcast", "barrier"), where the backend measures it (the MPI backend; Horovod has its timeline)."""
        return None

    @contextlib.contextmanager
    def steady_step(self, steady: bool = True) -> Iterator[None]:
        """Marks one training step after the first (`steady`): every rank is in the same loop and no rank
        has a legitimate long wait (tracing, a checkpoint, an evaluation), so a backend may end the job
        sooner when a peer goes silent here (the MPI backend's step deadline). No effect by default."""
        yield

    # -- primitives: a backend overrides the `_` methods for size > 1 ------------------------------
    def alltoall(self, tensor, splits, name: Optional[str] = None):
        """Send rows of `tensor` to ranks in order (`splits[i]` rows to rank i).

        Returns (received, received_splits). Differentiable: the gradient is the reverse all-to-all.
        """
        if self.size == 1:
            return tensor, splits
        return self._alltoall(tensor, splits, name)

    def start_alltoall(self, rows, splits, name: str) -> StartedAlltoall:
        """`alltoall` of numpy `rows` (int32, say) outside any graph, started now and finished by the handle's
        `wait()`: what the ranks compute in between overlaps the transfer. Every rank starts it at the same
        point of its sequence of collectives and waits for it later. Only where `starts_alltoall_early`."""
        if self.size == 1:
            return StartedAlltoall(lambda: (rows, splits))
        if not self.starts_alltoall_early:
            raise NotImplementedError(f"the {self.backend} backend cannot start an all-to-all and finish it later")
        return self._start_alltoall(rows, splits, name)

    def allreduce_sum(self, tensor, name: Optional[str] = None):
        if self.size == 1:
            return tensor
        return self._allreduce_sum(tensor, name)

    def all_ranks_true(self, flag, name: Optional[str] = None):
        """True on every rank iff `flag` (a scalar bool tensor) is true on every rank.

        For decisions every rank must take alike although each sees only its own data or shards:
        skipping a float16 step with an overflow, refusing to checkpoint non-finite weights.
        """
        if self.size == 1:
            return flag
        import tensorflow as tf

        count = self._allreduce_sum(tf.cast(flag, tf.int32), name)
        return tf.equal(count, self.size)

    def allgather(self, tensor, name: Optional[str] = None):
        """Every rank's `tensor` concatenated along the first dimension in rank order (it may differ)."""
        if self.size == 1:
            return tensor
        return self._allgather(tensor, name)

    def broadcast_variables(self, variables: Sequence, root_rank: int = 0) -> None:
        if self.size > 1 and variables:
            self._broadcast_variables(list(variables), root_rank)

    def broadcast_object(self, obj, root_rank: int = 0, name: Optional[str] = None):
        """Broadcast a small JSON-like Python object (config, plan, step) from `root_rank`."""
        if self.size == 1:
            return obj
        return self._broadcast_object(obj, root_rank, name)

    def barrier(self) -> None:
        """Block until every rank gets here."""
        if self.size > 1:
            self._barrier()

    def max_over_ranks(self, value: int, name: Optional[str] = None) -> int:
        """The largest of the ranks' integer `value`s, on every rank (one scalar collective; none with one rank).

        For decisions all ranks must take together from what only some of them know, e.g. whether any
        rank wants to stop at this step boundary.
        """
        if self.size == 1:
            return int(value)
        return self._max_over_ranks(int(value), name)

    def allreduce_sparse_mean(self, grad):
        """Rank mean of an IndexedSlices gradient (two allgathers, then / N; no arithmetic across ranks)."""
        if self.size == 1:
            return grad
        return self._allreduce_sparse_mean(grad)

    def _alltoall(self, tensor, splits, name: Optional[str]):
        raise NotImplementedError

    def _allreduce_sum(self, tensor, name: Optional[str]):
        raise NotImplementedError

    def _start_alltoall(self, rows, splits, name: str) -> StartedAlltoall:
        raise NotImplementedError

    def _allgather(self, tensor, name: Optional[str]):
        raise NotImplementedError

    def _broadcast_variables(self, variables: list, root_rank: int) -> None:
        raise NotImplementedError

    def _broadcast_object(self, obj, root_rank: int, name: Optional[str]):
        raise NotImplementedError

    def _barrier(self) -> None:
        raise NotImplementedError

    def _max_over_ranks(self, value: int, name: Optional[str]) -> int:
        raise NotImplementedError

    def _allreduce_sparse_mean(self, grad):
        raise NotImplementedError

    def _mean_of_flat(self, flat, name: str):
        """The rank mean of a 1-D tensor, whose bits do not depend on timing (same on every rank)."""
        raise NotImplementedError

    def _allgather_bytes(self, data: bytes, name: str) -> List[bytes]:
        """Every rank's `data` in rank order: the lengths, then the bytes, through the tensor allgather."""
        import numpy as np
        import tensorflow as tf

        array = np.frombuffer(data, dtype=np.uint8)
        sizes = self.allgather(tf.constant([array.size], tf.int64), name=f"{name}.sizes").numpy()
        gathered = self.allgather(tf.constant(array), name=f"{name}.bytes").numpy().tobytes()
        ends = np.cumsum(sizes)
        return [gathered[end - size:end] for size, end in zip(sizes, ends)]

    # -- built on the primitives ---------------------------------------------------------------------
    def allgather_object(self, obj, name: str = "dlrm_allgather_object") -> list:
        """Every rank's `obj` (JSON-serialisable, small) in rank order, on every rank.

        For agreeing on Python values (a start-up check's outcome, what a rank found in its share of the
        data, an error message); JSON, not pickle, so tuples arrive as lists at every world size.
        """
        if self.size == 1:
            return [json.loads(json.dumps(obj))]
        return [json.loads(data.decode("utf-8"))
                for data in self._allgather_bytes(json.dumps(obj).encode("utf-8"), name)]

    def agree(self, problem: Optional[str], name: str = "dlrm_agree") -> List[Failure]:
        """Every rank passes its own problem (or None) and gets every failing rank's, lowest rank first.

        The shared step of "stop together": all ranks see the same list, so they take the same branch
        (the lowest failing rank reports, the others stop quietly) instead of hanging in a collective.
        """
        report = None if problem is None else {"host": socket.gethostname(), "message": problem}
        reports = self.allgather_object(report, name=name)
        return [Failure(rank, r["host"], r["message"]) for rank, r in enumerate(reports) if r]

    def raise_if_any_failed(self, problem: Optional[str], error: Callable[[str], Exception], name: str) -> None:
        """`agree`, then every rank raises `error` with the lowest failing rank's message if any rank failed."""
        failures = self.agree(problem, name=name)
        if failures:
            raise error(failures[0].message)

    def averaging_tape(self, tape, model_parallel_variables: Sequence = ()) -> "AveragingTape":
        """Wrap a GradientTape so data-parallel gradients are averaged over ranks, the same bits every run.

        Model-parallel variables (embedding shards owned by this rank) are not allreduced: their gradient
        is divided by the world size. Each rank's loss is `sum(local BCE) * N / global_rows` (the local
        mean when the batch splits evenly), so the average of the data-parallel gradients is the gradient
        of the global-batch mean, while a shard receives the sum of every rank's loss gradient through the
        all-to-all, i.e. N x that gradient; dividing by N makes it exactly the single-process gradient,
        also for an uneven last batch. The hybrid-parallel tests check this against one process.
        """
        return AveragingTape(self, tape, model_parallel_variables)

    def average_in_fixed_buffers(self, tensors: Sequence, name: str) -> list:
        """Rank means of `tensors`: flattened and concatenated in the given order, one reduction per dtype.

        The buffers' layout depends only on the tensors' order and shapes (static), and each backend reduces
        a buffer in an order that does not depend on timing, so every run computes the same bits.
        """
        if self.size == 1:
            return list(tensors)
        import tensorflow as tf

        means: list = [None] * len(tensors)
        by_dtype: Dict[Any, List[int]] = {}
        for i, tensor in enumerate(tensors):
            by_dtype.setdefault(tensor.dtype, []).append(i)
        for dtype, positions in by_dtype.items():
            parts = [tensors[i] for i in positions]
            flat = tf.concat([tf.reshape(part, [-1]) for part in parts], axis=0)
            reduced = self._mean_of_flat(flat, name=f"{name}_{dtype.name}")
            pieces = tf.split(reduced, [part.shape.num_elements() for part in parts])
            for i, part, piece in zip(positions, parts, pieces):
                means[i] = tf.reshape(piece, part.shape)
        return means


class AveragingTape:
    """`gradient()` like Horovod's DistributedGradientTape, with a reduction whose bits do not depend on timing.

    Horovod fuses the allreduces that are ready in one cycle into one buffer, and with 3 or more ranks
    the sum of an element depends on its position in that buffer; which gradients share a cycle is a
    matter of timing. So every dense gradient (and any scalar the step also averages, such as the
    loss) goes into ONE flat buffer per dtype, reduced by one collective: its layout is fixed by the
    variable order, and no other float allreduce is in flight during a step to be fused with it.
    Sparse gradients of replicated tables are allgathered (no arithmetic across ranks).
    """

    def __init__(self, group: ProcessGroup, tape, model_parallel_variables: Sequence = ()):
        self._group = group
        self._tape = tape
        self._local = {var.ref() for var in model_parallel_variables}

    def gradient(self, target, sources):
        grads, _ = self.gradient_and_means(target, sources, [])
        return grads

    def gradient_and_means(self, target, sources, values: Sequence):
        """(averaged gradients of `target`, rank means of `values`); both travel in the same buffers."""
        import tensorflow as tf

        grads = self._tape.gradient(target, sources)
        size = self._group.size
        if size == 1:  # nothing to average; skips the backend, as Horovod's own tape does
            return list(grads), list(values)
        averaged = list(grads)
        dense_at = []
        for i, (grad, source) in enumerate(zip(grads, sources)):
            if grad is None:
                continue
            if source.ref() in self._local:
                averaged[i] = _divide(grad, size)
            elif isinstance(grad, tf.IndexedSlices):
                averaged[i] = self._group.allreduce_sparse_mean(grad)
            else:
                dense_at.append(i)
        means = self._group.average_in_fixed_buffers([grads[i] for i in dense_at] + list(values),
                                                     name="dense_gradients")
        for i, mean in zip(dense_at, means):
            averaged[i] = mean
        return averaged, means[len(dense_at):]


def _divide(grad, world_size: int):
    import tensorflow as tf

    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / world_size, grad.indices, grad.dense_shape)
    return grad / world_size
