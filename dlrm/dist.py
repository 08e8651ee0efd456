"""The only module that talks to Horovod / MPI directly.

Everything else asks this module for rank, world size and collectives. With a Gloo build and no
launcher, `init()` gives world size 1 and every collective still works, so the one-process path is
the same code as the N-process path.

Launchers put the rank in different environment variables (horovodrun: HOROVOD_*, mpirun:
OMPI_COMM_WORLD_*, srun: SLURM_* and PMI_* / PMIX_*). `launcher_world()` reads all of them so that
a launcher/MPI mismatch (every process rank 0 of size 1) is caught instead of silently training N
copies of the model.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence

# Fail fast instead of hanging when ranks disagree (a broken collective, a dead peer).
os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", "30")
os.environ.setdefault("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "120")

_hvd = None


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


def launcher_world(env: Optional[dict] = None) -> LauncherWorld:
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


def pin_gpu_to_local_rank() -> None:
    """One GPU per rank (by local rank), before TensorFlow touches a device. No-op on CPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    local_rank = launcher_world().local_rank
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")


def init() -> None:
    """Initialise Horovod once, and check it agrees with the launcher about the world size."""
    global _hvd
    if _hvd is not None:
        return
    pin_gpu_to_local_rank()
    import horovod.tensorflow as hvd

    hvd.init()
    _hvd = hvd
    announced = launcher_world()
    if announced.size > 1 and hvd.size() != announced.size:
        raise RuntimeError(
            f"launcher ({announced.source}) started {announced.size} tasks but Horovod sees a world of "
            f"{hvd.size()}: the MPI plugin does not match the cluster's MPI (use `srun --mpi=pmix`, "
            f"or `mpirun` inside the allocation); see README 'Running on a cluster'"
        )


def _require():
    if _hvd is None:
        init()
    return _hvd


def rank() -> int:
    return _require().rank()


def size() -> int:
    return _require().size()


def alltoall(tensor, splits, name: Optional[str] = None):
    """Send rows of `tensor` to ranks in order (`splits[i]` rows to rank i).

    Returns (received, received_splits). Differentiable: the gradient is the reverse all-to-all.
    """
    return _require().alltoall(tensor, splits=splits, name=name)


def allreduce_sum(tensor, name: Optional[str] = None):
    hvd = _require()
    return hvd.allreduce(tensor, op=hvd.Sum, name=name)


def all_ranks_true(flag, name: Optional[str] = None):
    """True on every rank iff `flag` (a scalar bool tensor) is true on every rank.

    For decisions every rank must take alike although each sees only its own data or shards:
    skipping a float16 step with an overflow, refusing to checkpoint non-finite weights.
    """
    hvd = _require()
    if hvd.size() == 1:
        return flag
    import tensorflow as tf

    count = hvd.allreduce(tf.cast(flag, tf.int32), op=hvd.Sum, name=name)
    return tf.equal(count, hvd.size())


def allgather(tensor, name: Optional[str] = None):
    return _require().allgather(tensor, name=name)


def broadcast_variables(variables: Sequence, root_rank: int = 0) -> None:
    hvd = _require()
    if hvd.size() > 1 and variables:
        hvd.broadcast_variables(list(variables), root_rank=root_rank)


def broadcast_object(obj, root_rank: int = 0, name: Optional[str] = None):
    """Broadcast a small JSON-like Python object (config, plan, step) from `root_rank`."""
    hvd = _require()
    if hvd.size() == 1:
        return obj
    return hvd.broadcast_object(obj, root_rank=root_rank, name=name)


def barrier() -> None:
    """Block until every rank gets here.

    An allreduce of a scalar, not `hvd.join()`: with Horovod 0.28.1 + TF eager, join blocks only the
    first time it is called and returns at once afterwards (checked here with 2 ranks), so ranks ran
    past the checkpoint barriers.
    """
    hvd = _require()
    if hvd.size() > 1:
        import tensorflow as tf

        hvd.allreduce(tf.zeros([], tf.float32), op=hvd.Sum, name="dlrm_barrier").numpy()


def distributed_tape(tape, model_parallel_variables: Sequence = ()) -> "AveragingTape":
    """Wrap a GradientTape so data-parallel gradients are averaged over ranks, the same bits every run.

    Model-parallel variables (embedding shards owned by this rank) are not allreduced: their gradient
    is divided by the world size. Each rank's loss is `sum(local BCE) * N / global_rows` (the local
    mean when the batch splits evenly), so the average of the data-parallel gradients is the gradient
    of the global-batch mean, while a shard receives the sum of every rank's loss gradient through the
    all-to-all, i.e. N x that gradient; dividing by N makes it exactly the single-process gradient,
    also for an uneven last batch. tests/test_hybrid_parallel.py checks this against one process.
    """
    return AveragingTape(tape, model_parallel_variables)


class AveragingTape:
    """`gradient()` like Horovod's DistributedGradientTape, with a reduction whose bits do not depend on timing.

    Horovod fuses the allreduces that are ready in one cycle into one buffer, and with 3 or more ranks
    the sum of an element depends on its position in that buffer; which gradients share a cycle is a
    matter of timing. So every dense gradient (and any scalar the step also averages, such as the
    loss) goes into ONE flat buffer per dtype, reduced by one allreduce: its layout is fixed by the
    variable order, and no other float allreduce is in flight during a step to be fused with it.
    Sparse gradients of replicated tables are allgathered (no arithmetic across ranks).
    """

    def __init__(self, tape, model_parallel_variables: Sequence = ()):
        self._tape = tape
        self._local = {var.ref() for var in model_parallel_variables}

    def gradient(self, target, sources):
        grads, _ = self.gradient_and_means(target, sources, [])
        return grads

    def gradient_and_means(self, target, sources, values: Sequence):
        """(averaged gradients of `target`, rank means of `values`); both travel in the same buffers."""
        import tensorflow as tf

        hvd = _require()
        grads = self._tape.gradient(target, sources)
        if hvd.size() == 1:  # nothing to average; skips Horovod's cycle, as its own tape does
            return list(grads), list(values)
        averaged = list(grads)
        dense_at = []
        for i, (grad, source) in enumerate(zip(grads, sources)):
            if grad is None:
                continue
            if source.ref() in self._local:
                averaged[i] = _divide(grad, hvd.size())
            elif isinstance(grad, tf.IndexedSlices):
                averaged[i] = hvd.allreduce(grad, op=hvd.Average)  # two allgathers, then / N
            else:
                dense_at.append(i)
        means = average_in_fixed_buffers([grads[i] for i in dense_at] + list(values), name="dense_gradients")
        for i, mean in zip(dense_at, means):
            averaged[i] = mean
        return averaged, means[len(dense_at):]


def _divide(grad, world_size: int):
    import tensorflow as tf

    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / world_size, grad.indices, grad.dense_shape)
    return grad / world_size


def average_in_fixed_buffers(tensors: Sequence, name: str) -> list:
    """Rank means of `tensors`: flattened and concatenated in the given order, one allreduce per dtype.

    The buffers' layout depends only on the tensors' order and shapes (static), so each element is
    summed in the same order in every run, whatever Horovod's fusion and cycle timing do.
    """
    import tensorflow as tf

    hvd = _require()
    means = [None] * len(tensors)
    by_dtype = {}
    for i, tensor in enumerate(tensors):
        by_dtype.setdefault(tensor.dtype, []).append(i)
    for dtype, positions in by_dtype.items():
        parts = [tensors[i] for i in positions]
        flat = tf.concat([tf.reshape(part, [-1]) for part in parts], axis=0)
        reduced = hvd.allreduce(flat, op=hvd.Average, name=f"{name}_{dtype.name}")
        pieces = tf.split(reduced, [part.shape.num_elements() for part in parts])
        for i, part, piece in zip(positions, parts, pieces):
            means[i] = tf.reshape(piece, part.shape)
    return means


# What a collective raises when a peer rank died or stalled: Horovod's shutdown after the stall timeout or
# a failed peer, and the Gloo transport errors seen inside compiled steps (timeout, closed connection).
PEER_FAILURE_MARKERS = ("Horovod has been shut down", "gloo/transport/", "Timed out waiting",
                        "Connection reset by peer", "Connection closed by peer")


def is_peer_failure(error: BaseException) -> bool:
    """True if `error` is Horovod reporting that another rank died or stalled (not a bug here)."""
    if _hvd is None:
        return False
    from horovod.common.exceptions import HorovodInternalError

    text = str(error)
    return isinstance(error, HorovodInternalError) or any(marker in text for marker in PEER_FAILURE_MARKERS)


def allgather_object(obj, name: str = "dlrm_allgather_object") -> list:
    """Every rank's `obj` (JSON-serialisable, small) in rank order, on every rank.

    For agreeing on Python values (a start-up check's outcome, what a rank found in its share of the
    data, an error message); JSON, not pickle, so tuples arrive as lists.
    """
    import json

    hvd = _require()
    if hvd.size() == 1:
        return [json.loads(json.dumps(obj))]  # what N ranks would see: one behaviour at every world size
    import numpy as np
    import tensorflow as tf

    data = np.frombuffer(json.dumps(obj).encode("utf-8"), dtype=np.uint8)
    sizes = hvd.allgather(tf.constant([data.size], tf.int64), name=f"{name}.sizes").numpy()
    gathered = hvd.allgather(tf.constant(data), name=f"{name}.bytes").numpy().tobytes()
    ends = np.cumsum(sizes)
    return [json.loads(gathered[end - size:end].decode("utf-8")) for size, end in zip(sizes, ends)]


def max_over_ranks(value: int, name: Optional[str] = None) -> int:
    """The largest of the ranks' integer `value`s, on every rank (one scalar allreduce; none with one rank).

    For decisions all ranks must take together from what only some of them know, e.g. whether any
    rank wants to stop at this step boundary.
    """
    hvd = _require()
    if hvd.size() == 1:
        return int(value)
    import tensorflow as tf

    return int(hvd.allreduce(tf.constant(value, tf.int32), op=hvd.Max, name=name).numpy())
