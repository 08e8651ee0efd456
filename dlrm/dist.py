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


def allreduce_mean(tensor, name: Optional[str] = None):
    hvd = _require()
    return hvd.allreduce(tensor, op=hvd.Average, name=name)


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


def distributed_tape(tape, model_parallel_variables: Sequence = ()):
    """Wrap a GradientTape so data-parallel gradients are averaged over ranks.

    Model-parallel variables (embedding shards owned by this rank) are registered as local: they are
    not allreduced, and their gradient is divided by the world size. Each rank's loss is
    `sum(local BCE) * N / global_rows` (the local mean when the batch splits evenly), so the average
    of the data-parallel gradients is the gradient of the global-batch mean, while a shard receives
    the sum of every rank's loss gradient through the all-to-all, i.e. N x that gradient; dividing by
    N makes it exactly the single-process gradient, also for an uneven last batch.
    tests/test_hybrid_parallel.py checks this against one process.
    """
    hvd = _require()
    wrapped = hvd.DistributedGradientTape(tape, sparse_as_dense=False, scale_local_gradients=True)
    for var in model_parallel_variables:
        wrapped.register_local_source(var)
    return wrapped


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
