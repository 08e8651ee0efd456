"""Launch N real ranks (horovodrun with Gloo or MPI) under a hard timeout and collect what they report.

Used by every multi-rank test: `run_ranks(2, worker_argv("some_worker", "--flag"))` starts
`horovodrun -np 2 -H localhost:2 --gloo python -m tests.workers.some_worker --flag` in its own process
group, with the stall detector tightened (a broken collective fails in seconds instead of hanging),
one TensorFlow thread per rank (2 cores are shared), and `MULTIRANK_RESULT_DIR` pointing to a fresh
directory. A worker calls `write_rank_result(rank, {...})` (JSON, no pickle) and the test reads the
results back from `RankRun.results`. On timeout the launcher and every rank are killed and the run is
reported with `timed_out=True`.

`backend="mpi"` launches the same worker with plain `mpirun -np N --allow-run-as-root --oversubscribe
--tag-output` instead (each rank's lines tagged as horovodrun tags them: `tests.support.processes.rank_lines`
reads both), without any HOROVOD_* variable (so the process group's `auto` picks the MPI backend) and with
the MPI backend's collective deadline tightened instead of Horovod's stall detector.

A test that names no backend launches the stack's own: horovodrun where Horovod is installed (the
TensorFlow 2.15 stack), plain mpirun on the current stack (docs/stack.md). A test that asks for horovodrun
by name skips where Horovod is not installed: `pytest -ra` lists each one with the reason.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import pytest

from dlrm.dist.launcher import installed
from tests.support import ROOT
from tests.support.processes import kill_tree, whole_tagged_lines

HOROVODRUN = str(Path(sys.executable).parent / "horovodrun")
MPIRUN = shutil.which("mpirun") or "mpirun"
RESULT_DIR_ENV = "MULTIRANK_RESULT_DIR"
MPI_ARGS = "--allow-run-as-root --oversubscribe"
# Plain mpirun tags each rank's lines as horovodrun does ("[1,0]<stderr>:..." vs "[0]<stderr>:...").
MPIRUN_TAGS = "--tag-output"

RANK_ENV = {
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "5",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "30",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "PYTHONUNBUFFERED": "1",
}
# The MPI backend's deadlines (it has no stall detector of its own): any collective, and a steady step's
# (above the 10 s default: 3 ranks share 2 loaded cores in CI).
MPI_RANK_ENV = {"DLRM_COLLECTIVE_TIMEOUT_SECONDS": "30", "DLRM_STEP_TIMEOUT_SECONDS": "20"}
BACKENDS = ("horovod", "mpi")
# The backend a test launches when it names none: Horovod where it is installed (the TensorFlow 2.15 stack),
# the MPI backend on the current stack, which has no Horovod (docs/stack.md).
STACK_BACKEND = "horovod" if installed("horovod") else "mpi"
NO_HOROVOD = "Horovod is not installed: this test launches horovodrun (the MPI backend's launches run without it)"


def skip_without_horovod(backend: str) -> None:
    """Skip the calling test if it needs horovodrun and Horovod is not installed."""
    if backend == "horovod" and not installed("horovod"):
        pytest.skip(NO_HOROVOD)


@dataclass
class RankRun:
    """Outcome of one launch: exit code, output, wall time and each rank's reported JSON."""

    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool
    result_dir: str
    results: Dict[int, dict] = field(default_factory=dict)

    def check(self) -> "RankRun":
        """Raise with the tail of the output unless the launch succeeded."""
        if self.returncode != 0 or self.timed_out:
            raise AssertionError(
                f"multi-rank run failed (rc={self.returncode}, timed_out={self.timed_out}, "
                f"{self.elapsed:.0f}s)\n--- stdout ---\n{self.stdout[-6000:]}\n--- stderr ---\n"
                f"{self.stderr[-6000:]}")
        return self


def worker_argv(name: str, *args: str) -> List[str]:
    """The python arguments that run the worker program `tests/workers/<name>.py` with `args`."""
    return ["-m", f"tests.workers.{name}", *args]


def launch_command(np: int, argv: Sequence[str], mpi: bool = False, backend: Optional[str] = None,
                   python: str = sys.executable) -> List[str]:
    """The launcher's command line for `np` local ranks running `python argv...`: horovodrun (Gloo, or its
    MPI controller with `mpi`) for the Horovod backend, plain mpirun for the MPI backend."""
    if (backend or STACK_BACKEND) == "mpi":
        return [MPIRUN, "-np", str(np), *MPI_ARGS.split(), MPIRUN_TAGS, python, *argv]
    transport = ["--mpi", f"--mpi-args={MPI_ARGS}"] if mpi else ["--gloo"]
    return [HOROVODRUN, "-np", str(np), "-H", f"localhost:{np}", *transport, python, *argv]


def rank_env(extra: Optional[Dict[str, str]] = None, result_dir: Optional[str] = None,
             backend: Optional[str] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(RANK_ENV)
    if (backend or STACK_BACKEND) == "mpi":
        env = {key: value for key, value in env.items() if not key.startswith("HOROVOD_")}
        env.update(MPI_RANK_ENV)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    if result_dir:
        env[RESULT_DIR_ENV] = result_dir
    env.update(extra or {})
    return env


def start_ranks(np: int, argv: Sequence[str], mpi: bool = False, env: Optional[Dict[str, str]] = None,
                result_dir: Optional[str] = None, backend: Optional[str] = None,
                python: str = sys.executable) -> subprocess.Popen:
    """Start the launcher in its own process group (so it can be killed whole) and return it; `python`: the
    ranks' interpreter (another stack's, for the tests that cross stacks)."""
    backend = backend or STACK_BACKEND
    skip_without_horovod(backend)
    return subprocess.Popen(launch_command(np, argv, mpi, backend, python), cwd=ROOT,
                            env=rank_env(env, result_dir, backend),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float, started: float, result_dir: str) -> RankRun:
    """Wait for a launch started by `start_ranks`; kill it, ranks included, on timeout."""
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)  # the launcher and every rank: mpirun puts each rank in a process group of its own
        stdout, stderr = proc.communicate()
    return RankRun(returncode=proc.returncode, stdout=whole_tagged_lines(stdout),
                   stderr=whole_tagged_lines(stderr), elapsed=time.monotonic() - started, timed_out=timed_out,
                   result_dir=result_dir, results=read_rank_results(result_dir))


def _guarded(run: RankRun, timeout: float, command: Sequence[str]) -> RankRun:
    """`run`, after a warning if it used more than half of its hang guard `timeout` (CI's summary lists them):
    a guard is not a speed target, and is raised before a loaded machine crosses it."""
    if not run.timed_out and run.elapsed > timeout / 2:
        warnings.warn(f"a launch took {run.elapsed:.0f} s of its {timeout:.0f} s hang guard: "
                      f"{' '.join(command)[-160:]}", stacklevel=3)
    return run


def run_ranks(np: int, argv: Sequence[str], mpi: bool = False, timeout: float = 240,
              env: Optional[Dict[str, str]] = None, result_dir: Optional[str] = None,
              backend: Optional[str] = None, python: str = sys.executable) -> RankRun:
    """Run `python argv...` on `np` local ranks and return a `RankRun` (never hangs past `timeout`)."""
    result_dir = result_dir or scratch_dir("multirank_")
    started = time.monotonic()
    run = finish(start_ranks(np, argv, mpi, env, result_dir, backend, python), timeout, started, result_dir)
    return _guarded(run, timeout, argv)


def run_single(argv: Sequence[str], timeout: float = 240, env: Optional[Dict[str, str]] = None,
               result_dir: Optional[str] = None) -> RankRun:
    """Run `python argv...` as ONE process without a launcher (world size 1), same environment."""
    result_dir = result_dir or scratch_dir("singlerank_")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=rank_env(env, result_dir),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return _guarded(finish(proc, timeout, started, result_dir), timeout, argv)


_MEMO: Dict[object, object] = {}


def scratch_dir(prefix: str) -> str:
    """A fresh temporary directory, removed when this (test) process exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


def memoised(key, compute: Callable[[], object]):
    """`compute()` once per pytest session: several tests (and test files) assert on one launch."""
    if key not in _MEMO:
        _MEMO[key] = compute()
    return _MEMO[key]


def write_rank_result(rank: int, result: dict) -> None:
    """Called inside a worker: store this rank's JSON result where `run_ranks` will read it."""
    directory = Path(os.environ[RESULT_DIR_ENV])
    tmp = directory / f"rank_{rank}.json.tmp"
    tmp.write_text(json.dumps(result))
    tmp.rename(directory / f"rank_{rank}.json")


def read_rank_results(result_dir: str) -> Dict[int, dict]:
    results = {}
    for path in Path(result_dir).glob("rank_*.json"):
        results[int(path.stem.split("_")[1])] = json.loads(path.read_text())
    return results
