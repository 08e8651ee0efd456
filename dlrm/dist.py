"""The only module that talks to Horovod / MPI directly: the process group.

`start()` starts Horovod once and returns a `ProcessGroup` (rank, size, local rank, collectives) that
the caller passes to everything that needs one; nothing starts Horovod behind the caller's back. With a
Gloo build and no launcher, `start()` gives world size 1 and every collective still works, so the
one-process path is the same code as the N-process path. `single_process()` is a world of one without
Horovod, for tools and tests that read or write checkpoints outside a run.

TensorFlow and Horovod are imported inside the functions that need them, so that the error reporter,
the launcher-environment parsing and the pure-Python tools can import this module without them.

Launchers put the rank in different environment variables (horovodrun: HOROVOD_*, mpirun:
OMPI_COMM_WORLD_*, srun: SLURM_* and PMI_* / PMIX_*). `launcher_world()` reads all of them so that
a launcher/MPI mismatch (every process rank 0 of size 1) is caught instead of silently training N
copies of the model.
"""
from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from dlrm.errors import EnvironmentProblem


@dataclass(frozen=True)
class LauncherWorld:
    """Rank layout as announced by the launcher's environment (before any collective runs)."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    source: str  # which environment variables it came from


_ENV_SOURCES = (
    # (name, rank, size, local rank, local size)
    ("horovod", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("pmix", "PMIX_RANK", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
)


def _int_env(env, name: str, default: int) -> int:
    value = env.get(name, "")
    # SLURM_NTASKS_PER_NODE may look like "2(x3)"; the leading number is the local size.
    digits = value.split("(")[0].split(",")[0]
    return int(digits) if digits.isdigit() else default


def launcher_world(env: Optional[Mapping[str, str]] = None) -> LauncherWorld:
    """Rank/size announced by the launcher, from the first family of variables that is present."""
    env = os.environ if env is None else env
    for source, rank_var, size_var, local_rank_var, local_size_var in _ENV_SOURCES:
        if rank_var in env and size_var in env:
            return LauncherWorld(
                rank=_int_env(env, rank_var, 0),
                size=_int_env(env, size_var, 1),
                local_rank=_int_env(env, local_rank_var, 0),
                local_size=_int_env(env, local_size_var, 1),
                source=source,
            )
    return LauncherWorld(rank=0, size=1, local_rank=0, local_size=1, source="none")


ENV_DEFAULTS_FILE = Path(__file__).with_name("horovod_defaults.env")


def env_defaults(path: Path = ENV_DEFAULTS_FILE) -> Dict[str, str]:
    """The `NAME=value` lines of the defaults file shared with the Slurm scripts (comments skipped)."""
    defaults = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            defaults[name.strip()] = value.strip()
    return defaults


def apply_env_defaults(env=None) -> None:
    """Set each default that the environment does not set already (what the user exports wins)."""
    env = os.environ if env is None else env
    for name, value in env_defaults().items():
        env.setdefault(name, value)


def pin_gpu_to_local_rank(local_rank: int) -> None:
    """One GPU per rank (by local rank), before TensorFlow touches a device. No-op on CPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")


_started: Optional["ProcessGroup"] = None  # Horovod starts once per process; later calls get the same group


def start() -> "ProcessGroup":
    """Start Horovod and return the process group of this run (the same group if it started already).

    Checks that Horovod agrees with the launcher about the world size: a launcher/MPI mismatch makes
    every process rank 0 of a world of one, which would silently train N copies of the model.
    """
    global _started
    if _started is not None:  # GPU pinning and hvd.init() must not run twice in one process
        return _started
    apply_env_defaults()
    announced = launcher_world()
    pin_gpu_to_local_rank(announced.local_rank)
    import horovod.tensorflow as hvd

    hvd.init()
    if announced.size > 1 and hvd.size() != announced.size:
        raise EnvironmentProblem(
            f"launcher ({announced.source}) started {announced.size} tasks but Horovod sees a world of "
            f"{hvd.size()}: the MPI plugin does not match the cluster's MPI (use `srun --mpi=pmix`, "
            f"or `mpirun` inside the allocation); see docs/cluster.md, 'How ranks start'"
        )
    _started = ProcessGroup(hvd, hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), announced)
    return _started


def single_process() -> "ProcessGroup":
    """A world of one that never starts Horovod: for tools and tests working outside a run."""
    return ProcessGroup(None, 0, 1, 0, 1, launcher_world({}))


@dataclass(frozen=True)
class Failure:
    """One rank's report in `ProcessGroup.agree`."""

    rank: int
    host: str
    message: str


# What a collective raises when a peer rank died or stalled: Horovod's shutdown after the stall timeout or
# a failed peer, and the Gloo transport errors seen inside compiled steps (timeout, closed connection).
PEER_FAILURE_MARKERS = ("Horovod has been shut down", "gloo/transport/", "Timed out waiting",
                        "Connection reset by peer", "Connection closed by peer")


def is_peer_failure(error: BaseException) -> bool:
    """True if `error` is Horovod reporting that another rank died or stalled (not a bug here)."""
    if _started is None:  # Horovod never started: it cannot be the cause
        return False
    from horovod.common.exceptions import HorovodInternalError

    text = str(error)
    return isinstance(error, HorovodInternalError) or any(marker in text for marker in PEER_FAILURE_MARKERS)


class ProcessGroup:
    """Rank, world size and the collectives of one run; the only handle on Horovod.

    Created once (`start()` or `single_process()`) and passed explicitly. Every collective is also
    correct with one rank; with one rank most of them skip Horovod, as Horovod's own wrappers do.
    """

    def __init__(self, hvd: Any, rank: int, size: int, local_rank: int, local_size: int,
                 launcher: LauncherWorld):
        self._hvd = hvd
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.launcher = launcher

    def __repr__(self) -> str:
        return f"ProcessGroup(rank={self.rank}, size={self.size}, horovod={self._hvd is not None})"

    def alltoall(self, tensor, splits, name: Optional[str] = None):
        """Send rows of `tensor` to ranks in order (`splits[i]` rows to rank i).

        Returns (received, received_splits). Differentiable: the gradient is the reverse all-to-all.
        """
        if self._hvd is None:
            return tensor, splits
        return self._hvd.alltoall(tensor, splits=splits, name=name)

    def allreduce_sum(self, tensor, name: Optional[str] = None):
        if self._hvd is None:
            return tensor
        return self._hvd.allreduce(tensor, op=self._hvd.Sum, name=name)

    def all_ranks_true(self, flag, name: Optional[str] = None):
        """True on every rank iff `flag` (a scalar bool tensor) is true on every rank.

        For decisions every rank must take alike although each sees only its own data or shards:
        skipping a float16 step with an overflow, refusing to checkpoint non-finite weights.
        """
        if self.size == 1:
            return flag
        import tensorflow as tf

        count = self._hvd.allreduce(tf.cast(flag, tf.int32), op=self._hvd.Sum, name=name)
        return tf.equal(count, self.size)

    def allgather(self, tensor, name: Optional[str] = None):
        if self._hvd is None:
            return tensor
        return self._hvd.allgather(tensor, name=name)

    def broadcast_variables(self, variables: Sequence, root_rank: int = 0) -> None:
        if self.size > 1 and variables:
            self._hvd.broadcast_variables(list(variables), root_rank=root_rank)

    def broadcast_object(self, obj, root_rank: int = 0, name: Optional[str] = None):
        """Broadcast a small JSON-like Python object (config, plan, step) from `root_rank`."""
        if self.size == 1:
            return obj
        return self._hvd.broadcast_object(obj, root_rank=root_rank, name=name)

    def barrier(self) -> None:
        """Block until every rank gets here.

        An allreduce of a scalar, not `hvd.join()`: with Horovod 0.28.1 + TF eager, join blocks only the
        first time it is called and returns at once afterwards, so ranks ran past checkpoint barriers.
        """
        if self.size > 1:
            import tensorflow as tf

            self._hvd.allreduce(tf.zeros([], tf.float32), op=self._hvd.Sum, name="dlrm_barrier").numpy()

    def allgather_object(self, obj, name: str = "dlrm_allgather_object") -> list:
        """Every rank's `obj` (JSON-serialisable, small) in rank order, on every rank.

        For agreeing on Python values (a start-up check's outcome, what a rank found in its share of the
        data, an error message); JSON, not pickle, so tuples arrive as lists at every world size.
        """
        if self.size == 1:
            return [json.loads(json.dumps(obj))]
        import numpy as np
        import tensorflow as tf

        data = np.frombuffer(json.dumps(obj).encode("utf-8"), dtype=np.uint8)
        sizes = self._hvd.allgather(tf.constant([data.size], tf.int64), name=f"{name}.sizes").numpy()
        gathered = self._hvd.allgather(tf.constant(data), name=f"{name}.bytes").numpy().tobytes()
        ends = np.cumsum(sizes)
        return [json.loads(gathered[end - size:end].decode("utf-8")) for size, end in zip(sizes, ends)]

    def agree(self, problem: Optional[str], name: str = "dlrm_agree") -> List[Failure]:
        """Every rank passes its own problem (or None) and gets every failing rank's, lowest rank first.

        The shared step of "stop together": all ranks see the same list, so they take the same branch
        (the lowest failing rank reports, the others stop quietly) instead of hanging in a collective.
        """
        report = None if problem is None else {"host": socket.gethostname(), "message": problem}
        reports = self.allgather_object(report, name=name)
        return [Failure(rank, r["host"], r["message"]) for rank, r in enumerate(reports) if r]

    def max_over_ranks(self, value: int, name: Optional[str] = None) -> int:
        """The largest of the ranks' integer `value`s, on every rank (one scalar allreduce; none with one rank).

        For decisions all ranks must take together from what only some of them know, e.g. whether any
        rank wants to stop at this step boundary.
        """
        if self.size == 1:
            return int(value)
        import tensorflow as tf

        return int(self._hvd.allreduce(tf.constant(value, tf.int32), op=self._hvd.Max, name=name).numpy())

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
        """Rank means of `tensors`: flattened and concatenated in the given order, one allreduce per dtype.

        The buffers' layout depends only on the tensors' order and shapes (static), so each element is
        summed in the same order in every run, whatever Horovod's fusion and cycle timing do.
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
            reduced = self._hvd.allreduce(flat, op=self._hvd.Average, name=f"{name}_{dtype.name}")
            pieces = tf.split(reduced, [part.shape.num_elements() for part in parts])
            for i, part, piece in zip(positions, parts, pieces):
                means[i] = tf.reshape(piece, part.shape)
        return means

    def allreduce_sparse_mean(self, grad):
        """Rank mean of an IndexedSlices gradient (two allgathers, then / N; no arithmetic across ranks)."""
        return self._hvd.allreduce(grad, op=self._hvd.Average)


class AveragingTape:
    """`gradient()` like Horovod's DistributedGradientTape, with a reduction whose bits do not depend on timing.

    Horovod fuses the allreduces that are ready in one cycle into one buffer, and with 3 or more ranks
    the sum of an element depends on its position in that buffer; which gradients share a cycle is a
    matter of timing. So every dense gradient (and any scalar the step also averages, such as the
    loss) goes into ONE flat buffer per dtype, reduced by one allreduce: its layout is fixed by the
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
        if size == 1:  # nothing to average; skips Horovod's cycle, as its own tape does
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

