"""The only package that talks to Horovod or MPI: the process group and its backends.

`start(backend)` starts the run's backend once and returns a `ProcessGroup` (rank, size, local rank,
collectives) that the caller passes to everything that needs one; nothing starts a backend behind the
caller's back. Backends: `horovod` (horovodrun with Gloo or MPI; a Gloo build without a launcher is a
world of one) and `mpi` (mpi4py under mpirun or srun, with a deadline on every collective); `auto`
chooses from the launcher's environment (`launcher.choose_backend`). `single_process()` is a world of one
without any backend, for tools and tests that read or write checkpoints outside a run.

Modules: `launcher` (the launcher's environment, the environment defaults, the backend choice), `group`
(the backend-independent interface and what is built on it: agree, allgather_object, the averaging tape
and its fixed buffers), `horovod`, `mpi`. TensorFlow, Horovod and mpi4py are imported inside the functions
that need them, so that the error reporter and the pure-Python tools can import this package without them.
"""
from __future__ import annotations

from typing import Optional

from dlrm.dist.group import AveragingTape, Failure, ProcessGroup, StartedAlltoall
from dlrm.dist.launcher import (
    BACKENDS,
    ENV_DEFAULTS_FILE,
    LauncherWorld,
    apply_env_defaults,
    choose_backend,
    cores_per_rank,
    env_defaults,
    launcher_world,
    pin_gpu_to_local_rank,
)

__all__ = ["BACKENDS", "ENV_DEFAULTS_FILE", "AveragingTape", "Failure", "LauncherWorld", "ProcessGroup",
           "StartedAlltoall", "apply_env_defaults", "choose_backend", "cores_per_rank", "env_defaults",
           "is_peer_failure", "launcher_world", "leave_after_error", "pin_gpu_to_local_rank", "single_process",
           "start"]

_started: Optional[ProcessGroup] = None  # a backend starts once per process; later calls get the same group


def start(backend: str = "auto") -> ProcessGroup:
    """Start the backend and return the process group of this run (the same group if it started already).

    Checks that the backend agrees with the launcher about the world size: a launcher/MPI mismatch makes
    every process rank 0 of a world of one, which would silently train N copies of the model. The MPI
    backend starts without TensorFlow, Horovod with it (`ProcessGroup.needs_tensorflow`); GPUs are pinned by
    whoever configures TensorFlow (`pin_gpu_to_local_rank`), before its first op.
    """
    global _started
    if _started is not None:  # the backend's init must not run twice in one process
        if backend not in ("auto", _started.backend):
            raise RuntimeError(f"the {_started.backend} backend started already; cannot start {backend}")
        return _started
    chosen = choose_backend(backend)
    announced = launcher_world()
    if chosen == "horovod":
        from dlrm.dist.horovod import start_horovod

        _started = start_horovod(announced)
    elif chosen == "mpi":
        from dlrm.dist.mpi import start_mpi

        _started = start_mpi(announced)
    else:
        _started = single_process()
    return _started


def single_process() -> ProcessGroup:
    """A world of one that never starts a backend: for tools and tests working outside a run."""
    return ProcessGroup(0, 1, 0, 1, launcher_world({}))


def leave_after_error(reported: bool, grace_seconds: float) -> None:
    """After a user error: what the started backend's `ProcessGroup.leave_after_error` does (a world of
    one's if none started: the launcher may still have started several processes)."""
    (_started or single_process()).leave_after_error(reported, grace_seconds)


def is_peer_failure(error: BaseException) -> bool:
    """True if `error` is the backend reporting that another rank died or stalled (not a bug here)."""
    return _started is not None and _started.is_peer_failure(error)
