"""The Horovod backend (horovodrun with Gloo or MPI, or one process): the process group's primitives on `hvd`.

Horovod has its own stall check: a rank stuck in a collective ends the job after
`HOROVOD_STALL_SHUTDOWN_TIME_SECONDS` (from the defaults file, applied before `hvd.init()`).
"""
from __future__ import annotations

from typing import Any, Optional

from dlrm.dist.group import ProcessGroup
from dlrm.dist.launcher import LauncherWorld, apply_env_defaults
from dlrm.errors import EnvironmentProblem

# What a collective raises when a peer rank died or stalled: Horovod's shutdown after the stall timeout or
# a failed peer, and the Gloo transport errors seen inside compiled steps (timeout, closed connection).
PEER_FAILURE_MARKERS = ("Horovod has been shut down", "gloo/transport/", "Timed out waiting",
                        "Connection reset by peer", "Connection closed by peer")


def start_horovod(announced: LauncherWorld) -> "HorovodGroup":
    """`hvd.init()`, after checking that Horovod agrees with the launcher about the world size."""
    apply_env_defaults()
    import horovod.tensorflow as hvd

    hvd.init()
    if announced.size > 1 and hvd.size() != announced.size:
        raise EnvironmentProblem(
            f"launcher ({announced.source}) started {announced.size} tasks but Horovod sees a world of "
            f"{hvd.size()}: the MPI plugin does not match the cluster's MPI (use `srun --mpi=pmix`, "
            f"or `mpirun` inside the allocation); see docs/cluster.md, 'How ranks start'"
        )
    return HorovodGroup(hvd, hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), announced)


class HorovodGroup(ProcessGroup):
    backend = "horovod"
    needs_tensorflow = True

    def __init__(self, hvd: Any, rank: int, size: int, local_rank: int, local_size: int, launcher: LauncherWorld):
        super().__init__(rank, size, local_rank, local_size, launcher)
        self._hvd = hvd

    def is_peer_failure(self, error: BaseException) -> bool:
        from horovod.common.exceptions import HorovodInternalError

        text = str(error)
        return isinstance(error, HorovodInternalError) or any(marker in text for marker in PEER_FAILURE_MARKERS)

    def _alltoall(self, tensor, splits, name: Optional[str]):
        return self._hvd.alltoall(tensor, splits=splits, name=name)

    def _allreduce_sum(self, tensor, name: Optional[str]):
        return self._hvd.allreduce(tensor, op=self._hvd.Sum, name=name)

    def _allgather(self, tensor, name: Optional[str]):
        return self._hvd.allgather(tensor, name=name)

    def _broadcast_variables(self, variables: list, root_rank: int) -> None:
        self._hvd.broadcast_variables(variables, root_rank=root_rank)

    def _broadcast_object(self, obj, root_rank: int, name: Optional[str]):
        return self._hvd.broadcast_object(obj, root_rank=root_rank, name=name)

    def _barrier(self) -> None:
        """An allreduce of a scalar, not `hvd.join()`: with Horovod 0.28.1 + TF eager, join blocks only the
        first time it is called and returns at once afterwards, so ranks ran past checkpoint barriers."""
        import tensorflow as tf

        self._hvd.allreduce(tf.zeros([], tf.float32), op=self._hvd.Sum, name="dlrm_barrier").numpy()

    def _max_over_ranks(self, value: int, name: Optional[str]) -> int:
        import tensorflow as tf

        return int(self._hvd.allreduce(tf.constant(value, tf.int32), op=self._hvd.Max, name=name).numpy())

    def _allreduce_sparse_mean(self, grad):
        return self._hvd.allreduce(grad, op=self._hvd.Average)

    def _mean_of_flat(self, flat, name: str):
        """One allreduce of the whole buffer: nothing else is in flight to be fused with it."""
        return self._hvd.allreduce(flat, op=self._hvd.Average, name=name)
