"""What the launcher announces before any collective runs: rank layout, environment defaults, the backend.

Launchers put the rank in different environment variables (horovodrun: HOROVOD_*, mpirun:
OMPI_COMM_WORLD_*, srun: SLURM_* and PMI_* / PMIX_*). `launcher_world()` reads all of them so that
a launcher/MPI mismatch (every process rank 0 of size 1) is caught instead of silently training N
copies of the model. No TensorFlow, Horovod or MPI import here: the error reporter uses this module.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional

from dlrm.errors import EnvironmentProblem

BACKENDS = ("auto", "horovod", "mpi")


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


ENV_DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "horovod_defaults.env"


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


def cores_per_rank() -> int:
    """This machine's cores divided among the ranks the launcher started on it."""
    return max(1, (os.cpu_count() or 1) // max(1, launcher_world().local_size))


def pin_gpu_to_local_rank(local_rank: int) -> None:
    """One GPU per rank (by local rank), before TensorFlow touches a device. No-op on CPU."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")


def installed(module: str) -> bool:
    """True if `module` can be imported (looked up, not imported: Horovod's import loads TensorFlow)."""
    return importlib.util.find_spec(module) is not None


def horovod_requested(env: Mapping[str, str]) -> bool:
    """Any HOROVOD_* variable: horovodrun's rank variables, or the Horovod defaults the Slurm scripts export."""
    return any(name.startswith("HOROVOD_") for name in env)


def choose_backend(requested: str, env: Optional[Mapping[str, str]] = None,
                   has_horovod: Optional[bool] = None, has_mpi4py: Optional[bool] = None) -> str:
    """"horovod" or "mpi" ("none": one process with neither installed), or an EnvironmentProblem.

    auto: Horovod when Horovod is requested (HOROVOD_* variables: horovodrun, the Slurm scripts); MPI under
    mpirun / srun when mpi4py is installed; one process uses Horovod if installed (as before), else MPI.
    """
    env = os.environ if env is None else env
    has_horovod = installed("horovod") if has_horovod is None else has_horovod
    has_mpi4py = installed("mpi4py") if has_mpi4py is None else has_mpi4py
    world = launcher_world(env)
    if requested not in BACKENDS:
        raise EnvironmentProblem(f"unknown backend {requested!r}: use one of {', '.join(BACKENDS)}")
    if requested == "auto":
        if has_horovod and (horovod_requested(env) or world.source == "none" or not has_mpi4py):
            return "horovod"
        if has_mpi4py:
            return "mpi"
        if world.size > 1:
            raise EnvironmentProblem(f"the launcher ({world.source}) started {world.size} tasks but neither "
                                     f"Horovod nor mpi4py is installed: install mpi4py (requirements.txt)")
        return "none"
    if requested == "horovod" and not has_horovod:
        raise EnvironmentProblem("--backend horovod: Horovod is not installed; use --backend mpi (mpi4py)")
    if requested == "mpi":
        if not has_mpi4py:
            raise EnvironmentProblem("--backend mpi: mpi4py is not installed (pip install -r requirements.txt), "
                                     "or use --backend horovod")
        if world.source == "horovod":
            raise EnvironmentProblem(
                "--backend mpi under horovodrun: horovodrun starts Horovod's workers, not an MPI job for mpi4py; "
                "launch with "
                f"`mpirun -np {world.size} python main.py --backend mpi` (or `srun --mpi=pmix`), "
                "or use --backend horovod")
    return requested
