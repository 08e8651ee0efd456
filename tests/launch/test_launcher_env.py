"""Launcher environment parsing and the shared environment defaults (no Horovod started)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlrm import dist

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env, expected", [
    ({"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"},
     (3, 4, 1, 2, "horovod")),
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, (5, 8, 1, 4, "openmpi")),
    ({"PMIX_RANK": "2", "SLURM_NTASKS": "6", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "2(x3)"},
     (2, 6, 0, 2, "pmix")),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, (1, 2, 1, 2, "pmi")),
    ({"SLURM_PROCID": "7", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3", "SLURM_NTASKS_PER_NODE": "4,4"},
     (7, 8, 3, 4, "slurm")),
    ({}, (0, 1, 0, 1, "none")),
    # Horovod's variables win over the Slurm allocation they run inside.
    ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, (1, 2, 0, 1, "horovod")),
])
def test_launcher_world_reads_each_launcher(env, expected):
    world = dist.launcher_world(env)
    assert (world.rank, world.size, world.local_rank, world.local_size, world.source) == expected


def test_launcher_world_missing_local_variables_default_to_one_per_node():
    world = dist.launcher_world({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "garbage"})
    assert (world.rank, world.size, world.local_rank, world.local_size) == (1, 2, 0, 1)


def test_env_defaults_fill_only_what_is_unset():
    defaults = dist.env_defaults()
    assert set(defaults) >= {"HOROVOD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
                             "HOROVOD_CYCLE_TIME"}
    assert defaults["HOROVOD_CYCLE_TIME"] == "5"  # ranks that fill every core keep them for the step
    env = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "5"}
    dist.apply_env_defaults(env)
    assert env["HOROVOD_STALL_CHECK_TIME_SECONDS"] == "5"
    assert env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == defaults["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"]


def test_slurm_scripts_export_the_same_defaults_as_the_trainer():
    """The launcher scripts and the trainer read one file, so their stall timeouts cannot drift apart."""
    script = 'source slurm/common.sh; dlrm_env_defaults; env'
    env = {key: value for key, value in os.environ.items() if not key.startswith("HOROVOD_")}
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, env={**env, "DLRM_ROOT": str(ROOT)},
                         capture_output=True, text=True, check=True).stdout
    exported = dict(line.split("=", 1) for line in out.splitlines() if line.startswith("HOROVOD_"))
    assert exported == dist.env_defaults()


def test_single_process_group_needs_no_horovod():
    group = dist.single_process()
    assert (group.rank, group.size, group.local_rank, group.local_size) == (0, 1, 0, 1)
    assert group.allgather_object({"a": (1, 2)}) == [{"a": [1, 2]}]  # JSON at every world size
    assert group.max_over_ranks(7) == 7
    assert group.agree(None) == []
    [failure] = group.agree("disk full")
    assert (failure.rank, failure.message) == (0, "disk full")
    group.barrier()


def test_peer_failure_is_never_blamed_when_horovod_never_started():
    code = ("import sys; from dlrm import dist; "
            "error = RuntimeError('Horovod has been shut down'); "
            "print(dist.is_peer_failure(error), 'horovod.tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_starting_twice_gives_the_same_group():
    """Horovod (and GPU pinning) start once per process; a second start() must not redo them."""
    code = ("from dlrm import dist; first = dist.start(); second = dist.start(); "
            "print(first is second, first.size, dist.is_peer_failure(RuntimeError('Horovod has been shut down')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         timeout=120).stdout
    assert out.split()[-3:] == ["True", "1", "True"]


def test_a_launcher_announcing_more_ranks_than_horovod_sees_gets_one_message():
    """As under `srun` with an MPI plugin that does not match: Slurm announces 2 tasks, Horovod starts
    a world of one. main.py must say so in one line before any work, not train alone."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HOROVOD_", "OMPI_", "PMI"))}
    env.update(SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="2",
               TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "main.py", "--max_steps", "1"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [message] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "started 2 tasks but Horovod sees a world of 1" in message


def test_an_unsafe_numba_threading_layer_gets_one_message():
    code = ("from dlrm.cli_errors import run_main; from dlrm.data.decode_numba import use_threads; "
            "import sys; sys.exit(run_main(lambda argv: use_threads(2), []))")
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == ("error: numba's workqueue threading layer is not thread-safe "
                                   "(NUMBA_THREADING_LAYER=workqueue): use omp or tbb, or one decode thread")
