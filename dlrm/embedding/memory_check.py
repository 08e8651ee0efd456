"""Does the embedding plan fit in this machine's memory? Checked before any table is allocated.

A model too big for the machine otherwise dies inside numpy or TensorFlow's allocator with a
traceback (or is killed by the kernel), after the dataset has been opened and the model half built.
Each rank compares its share of the plan (weights + optimizer slots) with the memory available to
it: the machine's available memory, a cgroup limit and the address-space limit (`ulimit -v`),
whichever is smallest, divided among the ranks on this node. The ranks exchange their figures, so
every rank reaches the same verdict and rank 0 reports it once.
"""
from __future__ import annotations

import resource
from typing import Optional, Tuple

from dlrm import dist
from dlrm.embedding.planner import Plan
from dlrm.errors import UserError
from dlrm.sizes import format_bytes


class NotEnoughMemory(UserError):
    """The embedding tables of some rank do not fit in the memory available to it."""

    on_every_rank = True  # the verdict is agreed over all ranks


def _meminfo_bytes(field: str) -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (no limit) -> None


def _cgroup_room() -> Optional[int]:
    """Bytes left under this process's cgroup memory limit (v2, else v1), None without a limit."""
    for limit_path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit is not None and usage is not None and limit < 1 << 60:
            return max(0, limit - usage)
    return None


def _address_space_room() -> Optional[int]:
    """Bytes of virtual address space left under `ulimit -v` (RLIMIT_AS), None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    used = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
    except OSError:
        pass
    return max(0, soft - used)


def available_memory(ranks_on_node: int = 1) -> Tuple[int, str]:
    """(bytes this process can still allocate, what limits it) from the smallest known limit.

    The machine's memory and the cgroup's are shared by the `ranks_on_node` ranks of this node; the
    address-space limit is per process."""
    shared = max(1, ranks_on_node)
    machine, cgroup = _meminfo_bytes("MemAvailable"), _cgroup_room()
    candidates = [(None if machine is None else machine // shared, "available memory of this machine"),
                  (None if cgroup is None else cgroup // shared, "the cgroup memory limit"),
                  (_address_space_room(), "the address-space limit (ulimit -v)")]
    known = [(room, why) for room, why in candidates if room is not None]
    if not known:
        return 1 << 62, "no known limit"
    return min(known)


def check_plan_fits_machine(plan: Plan, group: dist.ProcessGroup) -> None:
    """Raise `NotEnoughMemory` on every rank if the tables of any rank exceed the memory it has."""
    world = dist.launcher_world()
    share, limited_by = available_memory(world.local_size)
    mine = plan.ranks[group.rank].memory_bytes
    figures = group.allgather_object([mine, share, world.local_size, limited_by])
    short = [(rank, need, have, local, why) for rank, (need, have, local, why) in enumerate(figures) if need > have]
    if not short:
        return
    rank, need, have, local, why = max(short, key=lambda item: item[1] - item[2])
    weights = need // (1 + plan.optimizer_slots)
    on_rank = f" on rank {rank}" if plan.world_size > 1 else ""
    shared = f", shared by {local} ranks on its node" if local > 1 else ""
    raise NotEnoughMemory(
        f"the embedding tables need {format_bytes(need)}{on_rank} (weights {format_bytes(weights)} "
        f"+ {plan.optimizer_slots} optimizer slot(s)) but only {format_bytes(have)} is available to it "
        f"({why}{shared}): use more ranks or nodes, a smaller --embedding_dim or an optimizer with fewer "
        f"slots (--optimizer sgd), or give the memory each rank may use with --rank_memory so that the "
        f"planner spreads the tables within it")
