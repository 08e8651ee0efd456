"""The MPI backend on mpi4py: every collective is point-to-point messages polled against a deadline.

MPI has no stall check: a blocking collective waits forever for a rank that is stopped or wedged. So no
collective here blocks. Each one is, for every peer, one nonblocking send (`Isend`) of a contiguous byte
buffer and one receive sized from a nonblocking probe (`Improbe`, then `Irecv`), and the rank polls them
with short sleeps until all are done or the deadline passes (time this rank itself was stopped does not
count: a rank resumed after SIGSTOP blames nobody). Polling per peer tells WHICH peers have not delivered:
on timeout the rank prints one line naming itself, the silent ranks and the collective, and calls
`MPI_Abort`, so mpirun / srun end every rank.

Two deadlines. A steady training step (`ProcessGroup.steady_step`: a step after the first, and inside it
every collective of a graph that has run before) waits `DLRM_STEP_TIMEOUT_SECONDS` (10 s by default, well
under Slurm's default KillWait of 30 s): there the ranks are in lockstep and a silent peer is dead or
stalled. Every other collective waits `DLRM_COLLECTIVE_TIMEOUT_SECONDS` (300 s), which covers the long
legitimate waits: start-up and rank 0 generating the demo data, tracing a step, checkpoints, evaluations.

Order instead of names: MPI matches messages by (source, tag) in the order they were sent, so every rank
must issue its collectives in the same order. The tag is the collective's sequence number, and inside a
`tf.function` every collective is a `tf.numpy_function` with a control dependency on the previous one of
the same graph: the traced order (the same code on every rank) is the order they run in, whatever
TensorFlow's scheduling. The all-to-all is differentiable (`tf.custom_gradient`: the reverse all-to-all).

An all-to-all can also start early (`start_alltoall`, for the ids of the next batch: `dlrm.train.ids_ahead`):
its messages are posted at once, every other collective polls them too while it waits for its own, and
its handle's `wait()` finishes it against the deadline like any collective.

Reductions are bit-reproducible for any world size and any timing: the buffer is cut into one chunk per
rank, each rank sums its chunk's contributions in rank order 0, 1, ..., N-1, and the summed chunks are
sent to every rank, so every rank gets the same bits in every run (a reduce-scatter and an allgather:
each rank sends and receives about twice the buffer, as a ring allreduce does).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
import time
import weakref
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from dlrm.dist.group import CollectiveTime, ProcessGroup, StartedAlltoall
from dlrm.dist.launcher import LauncherWorld
from dlrm.errors import EnvironmentProblem

TIMEOUT_ENV = "DLRM_COLLECTIVE_TIMEOUT_SECONDS"
STEP_TIMEOUT_ENV = "DLRM_STEP_TIMEOUT_SECONDS"
# A rank waits this long for its peers in one collective before ending the job. It must cover the longest
# legitimate wait: rank 0 generating the demo dataset or renaming a checkpoint while the others wait, a
# slow first step (tracing); Horovod's stall shutdown uses the same 300 s (horovod_defaults.env).
DEFAULT_TIMEOUT_SECONDS = 300.0
# In a steady step the ranks wait only for each other's compute: a peer silent this long is dead or stalled.
DEFAULT_STEP_TIMEOUT_SECONDS = 10.0
ABORT_EXIT_CODE = 1
_TAG_CYCLE = 32000  # MPI guarantees tags up to 32767
_SPIN_POLLS = 50  # polls without sleeping before backing off (small messages arrive within microseconds)
_MAX_POLL_SLEEP = 0.001
_FROZEN_GAP = 0.5  # a gap this long between two polls (which sleep 1 ms at most) is time this rank did not run


def collective_timeouts(env: Optional[Mapping[str, str]] = None) -> tuple:
    """(any collective, a steady step's) seconds a rank waits for its peers: `DLRM_COLLECTIVE_TIMEOUT_SECONDS`
    (default 300) and `DLRM_STEP_TIMEOUT_SECONDS` (default 10, never above the first)."""
    env = os.environ if env is None else env
    timeout = _seconds(env, TIMEOUT_ENV, DEFAULT_TIMEOUT_SECONDS)
    return timeout, min(timeout, _seconds(env, STEP_TIMEOUT_ENV, DEFAULT_STEP_TIMEOUT_SECONDS))


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    value = env.get(name, "").strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (seconds > 0 and np.isfinite(seconds)):
        raise EnvironmentProblem(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds


def start_mpi(announced: LauncherWorld) -> "MpiGroup":
    """Initialise MPI (mpi4py) and check that its world is the one the launcher announced."""
    timeout, step_timeout = collective_timeouts()
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as error:  # e.g. no MPI library that the installed mpi4py can load
        raise EnvironmentProblem(f"--backend mpi: mpi4py does not load ({error}); install an MPI library "
                                 f"(Debian: openmpi-bin) or use --backend horovod") from None

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if announced.size > 1 and size != announced.size:
        raise EnvironmentProblem(
            f"launcher ({announced.source}) started {announced.size} tasks but MPI sees a world of {size}: "
            f"the launcher does not start an MPI job this MPI understands (use `mpirun -np N`, or "
            f"`srun --mpi=pmix` with the MPI mpi4py was built against); see docs/cluster.md, 'How ranks start'")
    local = size == announced.size and announced.source != "none"
    group = MpiGroup(comm, rank, size, announced.local_rank if local else 0, announced.local_size if local else 1,
                     announced, timeout, step_timeout)
    if size > 1:
        _abort_on_uncaught_exception(comm)
    return group


def _abort_on_uncaught_exception(comm) -> None:
    """A rank that dies of an uncaught exception ends the job at once (after its traceback) instead of
    leaving the others waiting out the timeout (`MPI_Finalize` at exit would wait for them)."""
    previous = sys.excepthook

    def hook(kind, value, traceback) -> None:
        from mpi4py import MPI

        previous(kind, value, traceback)
        sys.stderr.flush()
        if not MPI.Is_finalized():  # e.g. Ctrl-C while a rank waits out its grace (`leave_after_error`)
            comm.Abort(ABORT_EXIT_CODE)

    sys.excepthook = hook


def _bytes(array: np.ndarray) -> np.ndarray:
    """A contiguous uint8 view of `array` (what travels: the receiver knows dtype and trailing shape)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _rows(data: np.ndarray, dtype, trailing: Sequence[int]) -> np.ndarray:
    return data.view(dtype).reshape((-1, *trailing))


def _op_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name).lstrip("_./-") or "collective"


@dataclasses.dataclass(eq=False)
class _Transfer:
    """A posted exchange (`MpiGroup._post`): its tag, the send buffers (alive until sent), the pending sends
    and receives by peer, the sources not yet heard from, what has arrived, and when the last source was heard."""

    tag: int
    payloads: Dict[int, np.ndarray]
    sending: Dict[int, Any]
    probing: List[int]
    receiving: Dict[int, tuple] = dataclasses.field(default_factory=dict)
    received: Dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    heard: Optional[float] = None  # time.monotonic() when the last source's message was matched (None: no sources)

    @property
    def done(self) -> bool:
        return not (self.probing or self.receiving or self.sending)


class MpiGroup(ProcessGroup):
    backend = "mpi"
    starts_alltoall_early = True

    def __init__(self, comm, rank: int, size: int, local_rank: int, local_size: int, launcher: LauncherWorld,
                 timeout: float = DEFAULT_TIMEOUT_SECONDS, step_timeout: float = DEFAULT_STEP_TIMEOUT_SECONDS):
        super().__init__(rank, size, local_rank, local_size, launcher)
        self._comm = comm
        self.timeout = timeout
        self.step_timeout = step_timeout
        self._steady = False  # inside a steady step (`steady_step`)
        self._tracing_run = False  # a graph's first run: its ranks may still be tracing it
        self._peers = [r for r in range(size) if r != rank]
        self._sequence = 0
        self._last_in_graph: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._early: List[_Transfer] = []  # started by `start_alltoall`, not yet waited for
        self._clock: Dict[str, CollectiveTime] = {}

    def collective_seconds(self) -> Dict[str, CollectiveTime]:
        return {kind: dataclasses.replace(time_) for kind, time_ in self._clock.items()}

    def leave_after_error(self, reported: bool, grace_seconds: float) -> None:
        """A rank that reported nothing waits its grace after `MPI_Finalize`, not before. Open MPI's
        finalize waits for every rank, so it returns once the reporting rank has printed its error and is
        leaving too, and every rank is done with its cleanup (e.g. rank 0 removing a partial checkpoint);
        then the reporting rank exits at once, mpirun names it and ends the others, still waiting. (With an
        MPI whose finalize does not wait, this is the plain wait of `ProcessGroup`.) The reporting rank
        returns and finalizes at exit; srun, which does not end the others when one fails, waits out their
        grace."""
        if reported or self.size == 1:
            return
        from mpi4py import MPI

        MPI.Finalize()
        time.sleep(grace_seconds)

    @contextlib.contextmanager
    def steady_step(self, steady: bool = True) -> Iterator[None]:
        previous, self._steady = self._steady, steady
        try:
            yield
        finally:
            self._steady = previous

    def _deadline_seconds(self) -> float:
        return self.step_timeout if self._steady and not self._tracing_run else self.timeout

    # -- the transport: one message per peer, polled against the deadline ---------------------------
    def _exchange(self, sends: Dict[int, np.ndarray], sources: Sequence[int], name: str,
                  kind: str) -> Dict[int, np.ndarray]:
        """Send each buffer of `sends` to its rank, receive one byte buffer from each rank of `sources`."""
        return self._complete(self._post(sends, sources), name, kind)

    def _post(self, sends: Dict[int, np.ndarray], sources: Sequence[int]) -> _Transfer:
        """Start an exchange (`_exchange`): the sends are posted, the receives are probed for by `_complete`."""
        from mpi4py import MPI

        self._sequence += 1
        tag = self._sequence % _TAG_CYCLE
        payloads = {peer: _bytes(buf) for peer, buf in sends.items()}
        sending = {peer: self._comm.Isend([data, MPI.BYTE], dest=peer, tag=tag) for peer, data in payloads.items()}
        return _Transfer(tag, payloads, sending, list(sources))

    def _advance(self, transfer: _Transfer, status) -> None:
        """One round of polling: receive what has arrived, take note of what has been sent."""
        from mpi4py import MPI

        for peer in list(transfer.probing):
            message = self._comm.Improbe(source=peer, tag=transfer.tag, status=status)
            if message is not None:
                data = np.empty(status.Get_count(MPI.BYTE), np.uint8)
                transfer.receiving[peer] = (message.Irecv([data, MPI.BYTE]), data)
                transfer.probing.remove(peer)
                if not transfer.probing:
                    transfer.heard = time.monotonic()
        for peer, (request, data) in list(transfer.receiving.items()):
            if request.Test():
                transfer.received[peer] = data
                del transfer.receiving[peer]
        for peer, request in list(transfer.sending.items()):
            if request.Test():
                del transfer.sending[peer]

    def _complete(self, transfer: _Transfer, name: str, kind: str) -> Dict[int, np.ndarray]:
        """Poll a posted exchange until every message is delivered; the received buffers by source rank.

        Exchanges started early (`start_alltoall`) and not yet waited for are polled too, so that their data
        moves while this rank is in any collective. Never blocks past the deadline (counted from this call): a
        peer that does not deliver ends the job (`_give_up`). The time it took is added to `kind`'s, its
        waiting part up to the arrival of the last peer's message (of a send only: all of it).
        """
        from mpi4py import MPI

        started = time.monotonic()
        status = MPI.Status()
        if transfer in self._early:
            self._early.remove(transfer)
        seconds = self._deadline_seconds()
        deadline, polls, polled = time.monotonic() + seconds, 0, time.monotonic()
        while True:
            self._advance(transfer, status)
            for early in self._early:
                self._advance(early, status)
            if transfer.done:
                break
            now = time.monotonic()
            if now - polled > _FROZEN_GAP:  # this rank was stopped itself (SIGSTOP, swapped out): not the peers' time
                deadline += now - polled
            polled = now
            if now > deadline:
                self._give_up(name, sorted([*transfer.probing, *transfer.receiving]), sorted(transfer.sending), seconds)
            polls += 1
            time.sleep(0.0 if polls < _SPIN_POLLS else min(_MAX_POLL_SLEEP, 2e-5 * (polls - _SPIN_POLLS + 1)))
        ended = time.monotonic()
        spent = self._clock.setdefault(kind, CollectiveTime())
        spent.calls += 1
        spent.seconds += ended - started
        spent.waiting += (ended if transfer.heard is None else max(started, transfer.heard)) - started
        return transfer.received

    def _give_up(self, name: str, silent: List[int], not_receiving: List[int], seconds: float) -> None:
        """One line naming this rank, the peers and the collective; then MPI_Abort ends every rank."""
        peers = silent or not_receiving
        who = f"rank{'s' if len(peers) > 1 else ''} {', '.join(map(str, peers))}"
        what = f"no data from {who}" if silent else f"{who} did not take its data"
        os.write(2, f"error: rank {self.rank}: {what} in '{name}' within {seconds:g} s (rank dead or "
                    f"stalled); ending the job\n".encode())
        self._comm.Abort(ABORT_EXIT_CODE)

    # -- collectives on numpy arrays ------------------------------------------------------------------
    def _np_alltoall(self, x: np.ndarray, splits: np.ndarray, name: str):
        return self._start_alltoall(x, splits, name).wait()

    def _start_alltoall(self, x: np.ndarray, splits: np.ndarray, name: str) -> StartedAlltoall:
        x, splits = np.ascontiguousarray(x), np.asarray(splits, np.int64).reshape(-1)
        if splits.shape != (self.size,) or splits.min(initial=0) < 0 or int(splits.sum()) != x.shape[0]:
            raise ValueError(f"'{name}': splits {splits.tolist()} do not cut {x.shape[0]} rows into {self.size}")
        offsets = np.concatenate([[0], np.cumsum(splits)])
        blocks = [x[offsets[r]:offsets[r + 1]] for r in range(self.size)]
        transfer = self._post({peer: blocks[peer] for peer in self._peers}, self._peers)
        self._early.append(transfer)

        def finish():
            got = self._complete(transfer, name, "alltoall")
            parts = [blocks[r] if r == self.rank else _rows(got[r], x.dtype, x.shape[1:]) for r in range(self.size)]
            return np.concatenate(parts), np.array([len(part) for part in parts], np.int32)

        return StartedAlltoall(finish)

    def _np_allgather(self, x: np.ndarray, name: str) -> np.ndarray:
        x = np.ascontiguousarray(x)
        got = self._exchange({peer: x for peer in self._peers}, self._peers, name, "allgather")
        return np.concatenate([x if r == self.rank else _rows(got[r], x.dtype, x.shape[1:])
                               for r in range(self.size)])

    def _allgather_bytes(self, data: bytes, name: str) -> List[bytes]:
        array = np.frombuffer(data, np.uint8)
        got = self._exchange({peer: array for peer in self._peers}, self._peers, name, "allgather")
        return [data if r == self.rank else got[r].tobytes() for r in range(self.size)]

    def _np_reduce(self, x: np.ndarray, op: str, name: str) -> np.ndarray:
        """Elementwise sum, max or mean over ranks, summed in rank order by the chunk's owner (same bits on
        every rank and in every run); `x` keeps its shape and dtype."""
        flat = np.ascontiguousarray(x).reshape(-1)
        bounds = [flat.size * r // self.size for r in range(self.size + 1)]
        chunks = [flat[bounds[r]:bounds[r + 1]] for r in range(self.size)]
        got = self._exchange({peer: chunks[peer] for peer in self._peers}, self._peers, name, "allreduce")
        total = chunks[self.rank].copy() if self.rank == 0 else got[0].view(flat.dtype).copy()
        for r in range(1, self.size):
            part = chunks[self.rank] if r == self.rank else got[r].view(flat.dtype)
            (np.maximum if op == "max" else np.add)(total, part, out=total)
        if op == "mean":
            np.divide(total, self.size, out=total)
        got = self._exchange({peer: total for peer in self._peers}, self._peers, name, "allreduce")
        reduced = np.concatenate([total if r == self.rank else got[r].view(flat.dtype) for r in range(self.size)])
        return reduced.reshape(np.shape(x))

    def _np_broadcast(self, data: Optional[np.ndarray], root_rank: int, name: str) -> np.ndarray:
        """`data` of the root (bytes on the other ranks)."""
        if self.rank == root_rank:
            assert data is not None
            self._exchange({peer: data for peer in self._peers}, [], name, "broadcast")
            return data
        return self._exchange({}, [root_rank], name, "broadcast")[root_rank]

    # -- inside and outside tf.function ---------------------------------------------------------------
    def _op(self, fn: Callable, inputs: list, dtypes: list, name: str) -> list:
        """`fn(*numpy inputs)` -> arrays of `dtypes`, as tensors: at once when eager; in a graph as a
        `tf.numpy_function` that runs after the graph's previous collective (the same order on every rank)."""
        import tensorflow as tf

        if tf.executing_eagerly():
            return [tf.convert_to_tensor(out) for out in fn(*[np.asarray(x) for x in inputs])]
        graph = tf.compat.v1.get_default_graph()
        previous = self._last_in_graph.get(graph)
        ran = [False]  # this trace's op has run: its first run may wait for ranks still tracing the graph

        def run(*arrays):
            self._tracing_run = not ran[0]
            try:
                return fn(*arrays)
            finally:
                self._tracing_run, ran[0] = False, True

        with tf.control_dependencies([previous] if previous is not None else []):
            outputs = tf.numpy_function(run, inputs, dtypes, stateful=True, name=_op_name(name))
        self._last_in_graph[graph] = outputs[0].op
        return list(outputs)

    def _exchange_rows(self, x, splits, name: str):
        import tensorflow as tf

        received, received_splits = self._op(lambda a, s: self._np_alltoall(a, s, name), [x, splits],
                                             [x.dtype, tf.int32], name)
        received.set_shape([None, *x.shape[1:]])
        received_splits.set_shape([self.size])
        return received, received_splits

    def _alltoall(self, tensor, splits, name: Optional[str]):
        import tensorflow as tf

        name = name or "alltoall"
        tensor, splits = tf.convert_to_tensor(tensor), tf.cast(splits, tf.int32)
        if not tensor.dtype.is_floating:
            return self._exchange_rows(tensor, splits, name)
        received_splits = []  # type: List[Any]  # (a type comment: AutoGraph refuses annotated closure names)

        @tf.custom_gradient
        def differentiable(x):
            received, sizes = self._exchange_rows(x, splits, name)
            received_splits.append(sizes)

            def reverse(upstream):  # rows go back to where they came from
                return self._exchange_rows(tf.convert_to_tensor(upstream), sizes, f"{name}_grad")[0]

            return received, reverse

        received = differentiable(tensor)
        return received, received_splits[0]

    def _reduce(self, tensor, op: str, name: str):
        import tensorflow as tf

        tensor = tf.convert_to_tensor(tensor)
        [reduced] = self._op(lambda a: (self._np_reduce(a, op, name),), [tensor], [tensor.dtype], name)
        reduced.set_shape(tensor.shape)
        return reduced

    def _allreduce_sum(self, tensor, name: Optional[str]):
        return self._reduce(tensor, "sum", name or "allreduce")

    def _mean_of_flat(self, flat, name: str):
        return self._reduce(flat, "mean", name)

    def _allgather(self, tensor, name: Optional[str]):
        import tensorflow as tf

        name = name or "allgather"
        tensor = tf.convert_to_tensor(tensor)
        [gathered] = self._op(lambda a: (self._np_allgather(a, name),), [tensor], [tensor.dtype], name)
        gathered.set_shape([None, *tensor.shape[1:]])
        return gathered

    def _allreduce_sparse_mean(self, grad):
        import tensorflow as tf

        values = self._allgather(grad.values, "sparse_gradient_values")
        indices = self._allgather(grad.indices, "sparse_gradient_indices")
        return tf.IndexedSlices(values / self.size, indices, grad.dense_shape)

    def _broadcast_variables(self, variables: list, root_rank: int) -> None:
        for i, variable in enumerate(variables):
            dtype = variable.dtype.as_numpy_dtype
            value = self._np_broadcast(variable.numpy() if self.rank == root_rank else None, root_rank,
                                       f"broadcast_variables.{i}")
            if self.rank != root_rank:
                variable.assign(value.view(dtype).reshape(variable.shape))

    def _broadcast_object(self, obj, root_rank: int, name: Optional[str]):
        """JSON, not pickle: tuples arrive as lists (as from `allgather_object`)."""
        data = np.frombuffer(json.dumps(obj).encode("utf-8"), np.uint8) if self.rank == root_rank else None
        return json.loads(self._np_broadcast(data, root_rank, name or "broadcast_object").tobytes().decode("utf-8"))

    def _barrier(self) -> None:
        self._exchange({peer: np.empty(0, np.uint8) for peer in self._peers}, self._peers, "barrier", "barrier")

    def _max_over_ranks(self, value: int, name: Optional[str]) -> int:
        return int(self._np_reduce(np.array([value], np.int64), "max", name or "max_over_ranks")[0])
