"""Launcher environment parsing and the shared environment defaults (no Horovod started)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlrm import dist
from dlrm.cli import parse_config
from dlrm.dist.launcher import installed
from dlrm.errors import EnvironmentProblem
from tests.support.multirank import skip_without_horovod
from tests.support.processes import own_lines

pytestmark = pytest.mark.both_stacks  # the backend choice and its messages depend on what the stack installs

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
    """A backend starts once per process; a second start() must not redo it."""
    code = ("from dlrm import dist; first = dist.start(); second = dist.start(); "
            "print(first is second, first.size, first.backend, "
            "dist.is_peer_failure(RuntimeError('Horovod has been shut down')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         timeout=120).stdout
    horovod = installed("horovod")
    assert out.split()[-4:] == ["True", "1", "horovod" if horovod else "mpi", str(horovod)]


def test_auto_without_horovod_starts_the_mpi_backend_and_never_imports_horovod():
    """The stack without Horovod (TensorFlow >= 2.16): one process gets the MPI backend's world of one. Horovod
    is hidden here (`sys.modules["horovod"] = None`), so this runs the same on both stacks."""
    code = ("import sys; sys.modules['horovod'] = None; from dlrm import dist; group = dist.start(); "
            "group.barrier(); print(group.backend, group.size, "
            "any(name.startswith('horovod') for name, module in sys.modules.items() if module))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")}).stdout
    assert out.split()[-3:] == ["mpi", "1", "False"]


@pytest.mark.multirank
@pytest.mark.parametrize("backend, sees", [("horovod", "Horovod sees"), ("mpi", "MPI sees"), ("auto", "MPI sees")])
def test_a_launcher_announcing_more_ranks_than_the_backend_sees_gets_one_message(backend, sees):
    """As under `srun` with an MPI plugin that does not match: Slurm announces 2 tasks, the backend starts
    a world of one. main.py must say so in one line before any work, not train alone (auto: no HOROVOD_*
    variable under srun, so MPI)."""
    skip_without_horovod(backend)
    done = run_main_with_env(["--max_steps", "1", "--backend", backend], SLURM_PROCID="0", SLURM_NTASKS="2",
                             SLURM_LOCALID="0", SLURM_NTASKS_PER_NODE="2")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [message] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert f"started 2 tasks but {sees} a world of 1" in message


def run_main_with_env(flags: list, **variables) -> subprocess.CompletedProcess:
    """`python main.py flags` as one process with `variables` set and no launcher variables of this shell."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HOROVOD_", "OMPI_", "PMI"))}
    env.update(variables, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "main.py", *flags], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.multirank
def test_the_mpi_backend_under_horovodrun_gloo_gets_one_message():
    """horovodrun --gloo announces its ranks in HOROVOD_* variables but starts no MPI world."""
    done = run_main_with_env(["--max_steps", "1", "--backend", "mpi"], HOROVOD_RANK="0", HOROVOD_SIZE="2",
                             HOROVOD_LOCAL_RANK="0", HOROVOD_LOCAL_SIZE="2")
    assert done.returncode == 1, done.stderr
    assert own_lines(done.stderr) == [
        "error: --backend mpi under horovodrun: horovodrun starts Horovod's workers, not an MPI job for mpi4py; "
        "launch with `mpirun -np 2 python "
        "main.py --backend mpi` (or `srun --mpi=pmix`), or use --backend horovod"], done.stderr


def test_the_mpi_backend_without_mpi4py_gets_one_message(tmp_path):
    with pytest.raises(EnvironmentProblem, match=r"^--backend mpi: mpi4py is not installed"):
        dist.choose_backend("mpi", {}, has_horovod=True, has_mpi4py=False)
    # installed but not loadable (here: hidden by a package of the same name that fails to import)
    (tmp_path / "mpi4py").mkdir()
    (tmp_path / "mpi4py" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    done = run_main_with_env(["--max_steps", "1", "--backend", "mpi"], PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    assert done.returncode == 1, done.stderr
    assert own_lines(done.stderr) == ["error: --backend mpi: mpi4py does not load (hidden by the test); install an "
                                      "MPI library (Debian: openmpi-bin) or use --backend horovod"]


@pytest.mark.parametrize("env, has_horovod, has_mpi4py, chosen", [
    ({}, True, True, "horovod"),  # one process: Horovod, as before the MPI backend existed
    ({}, False, True, "mpi"),
    ({}, False, False, "none"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, True, True, "mpi"),  # mpirun
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, True, False, "horovod"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "HOROVOD_STALL_CHECK_TIME_SECONDS": "60"}, True, True, "horovod"),
    ({"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}, True, True, "horovod"),  # horovodrun --gloo
    # no Horovod (TensorFlow >= 2.16): MPI, also under the Slurm scripts, which export the Horovod defaults
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, False, True, "mpi"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "HOROVOD_STALL_CHECK_TIME_SECONDS": "60"}, False, True, "mpi"),
])
def test_auto_chooses_the_backend_from_the_launcher(env, has_horovod, has_mpi4py, chosen):
    assert dist.choose_backend("auto", env, has_horovod=has_horovod, has_mpi4py=has_mpi4py) == chosen
    assert dist.choose_backend("horovod", env, has_horovod=True, has_mpi4py=has_mpi4py) == "horovod"


def test_an_unsafe_numba_threading_layer_gets_one_message():
    code = ("from dlrm.cli_errors import run_main; from dlrm.data.reader.decode_numba import use_threads; "
            "import sys; sys.exit(run_main(lambda argv: use_threads(2), []))")
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == ("error: numba's workqueue threading layer is not thread-safe "
                                   "(NUMBA_THREADING_LAYER=workqueue): use omp or tbb, or one decode thread")


@pytest.mark.parametrize("env, expected", [
    ({}, (300.0, 10.0)),
    ({"DLRM_COLLECTIVE_TIMEOUT_SECONDS": "60", "DLRM_STEP_TIMEOUT_SECONDS": "2.5"}, (60.0, 2.5)),
    ({"DLRM_COLLECTIVE_TIMEOUT_SECONDS": "4"}, (4.0, 4.0)),  # the step deadline is never the longer one
    ({"DLRM_STEP_TIMEOUT_SECONDS": " "}, (300.0, 10.0)),
])
def test_the_mpi_backend_deadlines_come_from_the_environment(env, expected):
    from dlrm.dist.mpi import collective_timeouts

    assert collective_timeouts(env) == expected


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "soon"])
def test_a_bad_mpi_deadline_is_one_message_naming_the_variable(value):
    from dlrm.dist.mpi import collective_timeouts

    with pytest.raises(EnvironmentProblem, match=rf"DLRM_STEP_TIMEOUT_SECONDS must be a positive number of "
                                                 rf"seconds, got '{value}'"):
        collective_timeouts({"DLRM_STEP_TIMEOUT_SECONDS": value})


@pytest.mark.parametrize("flags, mode, checkpoints", [
    ([], "train", "written"), (["--mode", "train"], "train", "written"), (["--mode", "eval"], "eval", "read"),
    (["--evaluate"], "eval", "read"), (["--mode=inference_benchmark"], "inference_benchmark", "read"),
    (["--benchmark"], "train", "none"), (["--mode", "train", "--benchmark"], "train", "none")])
def test_the_slurm_trainer_command_has_the_checkpoint_flags_of_its_run_only(tmp_path, flags, mode, checkpoints):
    """The launchers add --checkpoint_every to training jobs only and no checkpoint flag to the training
    benchmark: the trainer refuses a flag that changes nothing, and the command they build is one it accepts."""
    from dlrm.launch.submit import job_command

    restore = [] if checkpoints == "none" else ["--restore_checkpoint_path", str(tmp_path / "none")]
    command = job_command(str(tmp_path), [*flags, *restore])
    assert command[1] == str(ROOT / "main.py"), command
    assert ("--checkpoint_every" in command) == (checkpoints == "written"), command
    assert ("--save_checkpoint_path" in command) == (checkpoints != "none"), command
    config = parse_config(command[2:])
    assert (config.train.mode, config.train.benchmark) == (mode, "--benchmark" in flags)
