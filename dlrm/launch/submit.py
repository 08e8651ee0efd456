"""Submit the points of a sweep with submitit (Slurm, or local processes) and wait with a deadline.

Every point gets a directory `<sweep dir>/<point name>/` that is the job directory of the launcher
scripts in slurm/: metrics, logs/, checkpoints/. Next to them the launcher writes `point.json`
(the point, its trainer flags and the parsed trainer config, written before submission) and the
job writes `run.json` (wall time, exit status) when it ends.

How ranks start:
- Slurm: `tasks_per_node` x `nodes` tasks under `srun --mpi=pmix` (submitit's srun); each task runs
  `slurm/run_rank.sh`, i.e. `main.py` with the job directory's flags. Horovod's MPI controller gets
  rank and size from PMIx.
- local: one submitit process per point that runs `slurm/run_single_node.sh -np <world size>`
  (mpirun, or horovodrun --gloo on the Horovod stack), exactly what a user runs on a workstation.
A requeued/preempted Slurm job (submitit's checkpoint protocol) restarts the same command; the
trainer resumes from the checkpoints in the point directory.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence

import submitit

from dlrm.atomic import write_text_atomically
from dlrm.launch import slurm_state
from dlrm.launch.spec import SweepPoint, SweepSpec

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POINT_FILE = "point.json"
RUN_FILE = "run.json"


@dataclass(frozen=True)
class ExecutorOptions:
    """Resources of every point (from the command line); world size comes from the point."""

    executor: str = "slurm"  # "slurm" or "local"
    partition: Optional[str] = None
    tasks_per_node: int = 1  # ranks per node (one per GPU on GPU nodes)
    gpus_per_node: int = 0
    cpus_per_task: Optional[int] = None
    timeout_min: int = 60
    srun_mpi: str = "pmix"  # srun's MPI plugin for multi-task jobs (pmix or pmi2)

    def layout(self, world_size: int) -> tuple:
        """(nodes, tasks per node) for a world size: fill nodes with `tasks_per_node` ranks each."""
        if world_size <= self.tasks_per_node:
            return 1, world_size
        if world_size % self.tasks_per_node:
            raise ValueError(f"world size {world_size} is not a multiple of --tasks_per_node "
                             f"{self.tasks_per_node}")
        return world_size // self.tasks_per_node, self.tasks_per_node


def _write_json_atomically(path: str, data: dict) -> None:
    write_text_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


@dataclass
class TrainingRun(submitit.helpers.Checkpointable):
    """The function submitit runs for one point (pickled by submitit, holds only plain fields).

    On preemption/timeout submitit calls `checkpoint()` (inherited: resubmit the same call); the
    restarted command resumes from the trainer's checkpoints in `point_dir`.
    """

    point_dir: str
    trainer_flags: List[str]
    world_size: int
    local: bool
    python: str = sys.executable

    def __call__(self) -> dict:
        env = dict(os.environ, DLRM_JOB_DIR=self.point_dir, DLRM_PYTHON=self.python, DLRM_ROOT=PROJECT_ROOT)
        if self.local:
            command = ["bash", os.path.join(PROJECT_ROOT, "slurm", "run_single_node.sh"),
                       "-np", str(self.world_size), *self.trainer_flags]
            is_primary = True
        else:
            command = ["bash", os.path.join(PROJECT_ROOT, "slurm", "run_rank.sh"), *self.trainer_flags]
            is_primary = submitit.JobEnvironment().global_rank == 0
        started = time.time()
        returncode = subprocess.run(command, env=env).returncode
        record = {"returncode": returncode, "wall_seconds": round(time.time() - started, 3),
                  "started": started, "world_size": self.world_size,
                  "job_id": os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID")}
        if is_primary:
            _write_json_atomically(os.path.join(self.point_dir, RUN_FILE), record)
        if returncode != 0:
            raise RuntimeError(f"training in {self.point_dir} exited with status {returncode}; "
                               f"see {self.point_dir}/logs and the submitit log")
        return record


def job_command(job_dir: str, flags: Sequence[str]) -> List[str]:
    """The command every rank of a job in `job_dir` runs for these trainer flags: the launcher scripts' own
    (`slurm/common.sh`, `dlrm_job_command`), which adds the run and checkpoint directories."""
    script = ('source "$DLRM_ROOT/slurm/common.sh" || exit; dlrm_job_command "$@" || exit; '
              'printf "%s\\0" "${DLRM_CMD[@]}"')
    env = {**os.environ, "DLRM_ROOT": PROJECT_ROOT, "DLRM_JOB_DIR": job_dir, "DLRM_PYTHON": sys.executable}
    done = subprocess.run(["bash", "-c", script, "bash", *flags], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise ValueError(f"slurm/common.sh in {PROJECT_ROOT} did not give the job's command (exit "
                         f"{done.returncode}): {said[-1] if said else 'no message'}")
    return done.stdout.split("\0")[:-1]


def _trainer_config(job_dir: str, flags: Sequence[str]) -> dict:
    """The config the trainer will build from the job's command (its own parser: errors surface now)."""
    from dlrm.cli import parse_config
    from dlrm.errors import UsageError

    trainer_flags = job_command(job_dir, flags)[2:]
    try:
        return parse_config(trainer_flags).to_dict()
    except UsageError as error:
        message = str(error).strip().splitlines()[-1]
        command = shlex.join(trainer_flags)
        raise ValueError(f"trainer flags rejected by main.py's parser: {command}: {message}") from None


def make_executor(options: ExecutorOptions, folder: str, nodes: int, tasks_per_node: int, name: str):
    """A submitit executor for one point: local (one process, which starts the ranks itself) or
    Slurm with `nodes` x `tasks_per_node` tasks (srun's MPI plugin only when there are several)."""
    if options.executor == "local":
        executor = submitit.AutoExecutor(folder=folder, cluster="local")
        executor.update_parameters(timeout_min=options.timeout_min, name=name, nodes=1, tasks_per_node=1)
        return executor
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(timeout_min=options.timeout_min, name=name, nodes=nodes,
                               tasks_per_node=tasks_per_node)
    if nodes * tasks_per_node > 1:
        executor.update_parameters(slurm_srun_args=[f"--mpi={options.srun_mpi}"])
    if options.partition:
        executor.update_parameters(slurm_partition=options.partition)
    if options.gpus_per_node:
        executor.update_parameters(gpus_per_node=options.gpus_per_node)
    if options.cpus_per_task:
        executor.update_parameters(cpus_per_task=options.cpus_per_task)
    return executor


@dataclass
class Submitted:
    point: SweepPoint
    point_dir: str
    job: submitit.Job


def submit_sweep(spec: SweepSpec, sweep_dir: str, options: ExecutorOptions) -> List[Submitted]:
    """Write each point's directory and point.json, then submit every point; returns the jobs."""
    sweep_dir = os.path.abspath(sweep_dir)
    os.makedirs(sweep_dir, exist_ok=True)
    prepared = []
    for point in spec.points():  # check everything before submitting anything
        point_dir = os.path.join(sweep_dir, point.name)
        flags = point.trainer_flags(spec, point_dir)
        config = _trainer_config(point_dir, flags)
        nodes, tasks = options.layout(point.world_size)
        prepared.append((point, point_dir, flags, config, nodes, tasks))
    submitted = []
    for point, point_dir, flags, config, nodes, tasks in prepared:
        os.makedirs(point_dir, exist_ok=True)
        _write_json_atomically(os.path.join(point_dir, POINT_FILE), {
            "sweep": spec.name, "point": point.to_dict(), "trainer_flags": flags, "config": config,
            "nodes": nodes, "tasks_per_node": tasks, "executor": options.executor,
        })
        executor = make_executor(options, os.path.join(point_dir, "submitit"), nodes, tasks,
                                 name=f"{spec.name}-{point.name}")
        job = executor.submit(TrainingRun(point_dir, flags, point.world_size, options.executor == "local"))
        submitted.append(Submitted(point, point_dir, job))
    return submitted


def wait_for_jobs(jobs: Mapping[str, submitit.Job], timeout_s: float, poll_s: float = 2.0,
                  result_grace_s: float = 15.0) -> Dict[str, str]:
    """Wait until every job ({name: submitit job}) has finished or `timeout_s` passed.

    Returns {name: outcome}: "COMPLETED", or what went wrong. A Slurm job also counts as finished
    when slurmctld reports a final state but no result appeared within `result_grace_s` (cancelled,
    killed, node failure) or no longer knows it: submitit alone would wait for those forever when
    the cluster has no accounting.
    """
    deadline = time.monotonic() + timeout_s
    outcomes: Dict[str, str] = {}
    ended_at: Dict[str, float] = {}
    while True:
        for name, job in jobs.items():
            if name in outcomes:
                continue
            if job.done():
                error = job.exception()
                outcomes[name] = "COMPLETED" if error is None else f"FAILED (log: {job.paths.stderr})"
                continue
            if isinstance(job, submitit.SlurmJob):
                state = slurm_state.job_state(job.job_id)
                if state in slurm_state.FINAL_STATES or state == slurm_state.UNKNOWN:
                    first = ended_at.setdefault(name, time.monotonic())  # the result file may lag
                    if time.monotonic() - first > result_grace_s:
                        outcomes[name] = f"{state} without a result (log: {job.paths.stderr})"
                else:  # running again (requeued) or a passing scontrol error: restart the grace period
                    ended_at.pop(name, None)
        if len(outcomes) == len(jobs):
            return outcomes
        if time.monotonic() > deadline:
            for name, job in jobs.items():
                outcomes.setdefault(name, f"not finished after {timeout_s:.0f} s (job {job.job_id})")
            return outcomes
        time.sleep(poll_s)
