"""The Slurm launch path against a real two-node Slurm (tests/support/slurm_cluster.py).

- the cluster itself: a 2-node job whose ranks meet through `srun --mpi=pmix` and through `mpirun`;
- `sbatch -N 2 slurm/dlrm_multinode.sbatch`: trains with the embedding tables sharded over 2 ranks
  on 2 nodes; exit state, logged AUC, checkpoint and plan are checked;
- `scontrol requeue` of a running copy of that job: its ranks get SIGTERM, write a checkpoint of the
  step they stopped at, and the requeued job resumes from exactly that checkpoint and ends with the
  same evaluation as the uninterrupted job;
- the time limit: a job whose limit is brought close (`scontrol update TimeLimit`) gets the template's
  `--signal=B:USR1@...` warning, checkpoints, requeues itself and resumes from that checkpoint; a
  `scancel` afterwards checkpoints again and ends the job without requeueing it.
The first two training jobs run at the same time (each takes one CPU of each node) to keep the test short.
Every wait polls job state, logs or metrics with a deadline: nothing assumes how fast the host is.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from dlrm.train.metrics_log import METRICS_FILE, read_metrics
from tests.support import ROOT
from tests.support.multirank import RANK_ENV, STACK_BACKEND
from tests.support.slurm_cluster import is_running, pids_with_env, start_cluster

TEMPLATE = ROOT / "slurm" / "dlrm_multinode.sbatch"
PYTHON = sys.executable
# Through dlrm.dist (Horovod's MPI controller), the project's only way to MPI.
MPI_HELLO = """\
import os
import sys
import tensorflow as tf
from dlrm import dist
group = dist.start()
total = int(group.allreduce_sum(tf.constant(group.rank + 1)).numpy())
# one write per line: the two ranks share one output file and must not interleave
sys.stdout.write(f"{group.rank} {group.size} {os.environ['SLURMD_NODENAME']} {total}\\n")
sys.stdout.flush()
"""
# Tiny model and data: a 2-rank job takes well under a minute. Flags are given in full because with
# --dataset_path the trainer uses the reference defaults (batch 65536, ...).
TRAIN_ROWS, TEST_ROWS = 6144, 2048
TRAINER_FLAGS = [
    "--global_batch_size", "256", "--valid_batch_size", "1024", "--embedding_dim", "8",
    "--bottom_mlp_dims", "16-8", "--top_mlp_dims", "16-1", "--optimizer", "adagrad",
    "--learning_rate", "0.3", "--warmup_steps", "0", "--decay_start_step", "1000",
    "--max_steps", "40", "--log_every", "5", "--intra_op_threads", "1", "--inter_op_threads", "1",
    "--skip_data_validation",  # the generator's own data; the value check has its own tests
]
CHECKPOINT_EVERY = "5"
# Sent by the template's `#SBATCH --signal=B:USR1@<seconds>` and forwarded by its trap to the ranks.
WARNING_SIGNAL = "SIGUSR1"
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "COMPLETING")

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def job_env(work: Path, dataset: Path) -> dict:
    return {
        **RANK_ENV,
        # the two "nodes" share one host: Open MPI's shared-memory transport between them crashes
        "OMPI_MCA_btl": "self,tcp",
        "DLRM_ROOT": str(ROOT), "DLRM_PYTHON": PYTHON, "DLRM_RUNS_ROOT": str(work / "runs"),
        "DLRM_DATASET": str(dataset), "DLRM_CHECKPOINT_EVERY": CHECKPOINT_EVERY,
    }


def final_eval(job_dir: Path) -> dict:
    evals = records(job_dir, "eval")
    assert evals, f"no eval record in {job_dir}/metrics.jsonl"
    return evals[-1]


def job_report(cluster, job_dir: Path, out: Path) -> str:
    parts = [f"--- {out}", out.read_text(errors="replace")[-3000:] if out.exists() else "(missing)"]
    for log in sorted((job_dir / "logs").glob("*.log")) if (job_dir / "logs").exists() else []:
        parts += [f"--- {log}", log.read_text(errors="replace")[-3000:]]
    return "\n".join(parts) + "\n" + cluster.log_tail()


def submit_template(cluster, work: Path, name: str, env: dict, trainer_flags, sbatch_args=()) -> dict:
    """sbatch the template on 2 nodes x 1 task; returns the job's id, output file and job directory."""
    out = work / f"{name}.out"
    job_id = cluster.sbatch(["-N", "2", "--ntasks-per-node=1", f"--job-name={name}", f"--output={out}",
                             *sbatch_args, str(TEMPLATE), *trainer_flags], extra_env=env, cwd=str(work))
    return {"id": job_id, "out": out, "dir": work / "runs" / f"{name}-{job_id}"}


def records(job_dir: Path, kind: str) -> list:
    """The job's metrics records of one kind, by step ([] before the file exists)."""
    path = job_dir / METRICS_FILE
    return [r for r in read_metrics(str(path)) if r["kind"] == kind] if path.exists() else []


def wait_for(cluster, job: dict, what: str, predicate, timeout: float = 180):
    """Poll `predicate()` until it returns something truthy (returned) while the job is still active."""
    deadline = time.monotonic() + timeout
    while True:
        cluster.check_alive()
        found = predicate()
        if found:
            return found
        state = cluster.job_state(job["id"])
        problem = (f"job ended ({state}) before {what}" if state not in ACTIVE_STATES
                   else f"no {what} after {timeout} s" if time.monotonic() > deadline else None)
        assert problem is None, problem + "\n" + job_report(cluster, job["dir"], job["out"])
        time.sleep(0.2)


def release_requeued(cluster, job: dict, *updates: str) -> None:
    """Start a requeued job soon instead of after Slurm's ~2 minute hold (BeginTime). Not at once:
    slurmd revoked the job's old credential and refuses any credential of that job created in the
    same or an earlier second (whole-second timestamps), so a restart allocated within the second of
    the requeue fails with "Job credential revoked"."""
    cluster.wait_job(job["id"], 120, frozenset({"PENDING"}))
    cluster.run(["scontrol", "update", f"JobId={job['id']}", "StartTime=now+3", *updates])


def restored_steps(job_dir: Path) -> list:
    """Steps rank 0 restored from, from its log ("restored <dir> (step N, ...)")."""
    rank0 = job_dir / "logs" / "rank-0.log"
    lines = rank0.read_text().splitlines() if rank0.exists() else []
    return [int(line.split("(step ")[1].split(",")[0]) for line in lines if line.startswith("restored ")]


def stop_records(job_dir: Path) -> list:
    """(step, reason) of every stop the trainer recorded, in step order."""
    return [(r["step"], r.get("reason")) for r in records(job_dir, "stopped")]


def last_logged_step(job_dir: Path) -> int:
    return max([r["step"] for r in records(job_dir, "train")], default=0)


def checkpoint_steps(job_dir: Path) -> set:
    return {r["step"] for r in records(job_dir, "checkpoint")}


def run_seconds(info: dict) -> int:
    """scontrol's RunTime ([D-]HH:MM:SS) in seconds."""
    days, _, clock = info["RunTime"].rpartition("-")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def test_two_node_mpi_hello(slurm_cluster, tmp_path):
    """The fixture: 2 tasks on nodes n1 and n2 join one Horovod/MPI world via srun's PMIx and via
    mpirun (the template's two launchers)."""
    hello = tmp_path / "hello.py"
    hello.write_text(MPI_HELLO)
    out = tmp_path / "hello.out"
    script = (f"srun --mpi=pmix {PYTHON} {hello}\n"
              f"mpirun --allow-run-as-root {PYTHON} {hello}\n")
    job = slurm_cluster.sbatch(["-N", "2", "--ntasks-per-node=1", f"--output={out}", "--wrap", script],
                               extra_env={**RANK_ENV, "OMPI_MCA_btl": "self,tcp"})
    info = slurm_cluster.wait_job(job, timeout=180)
    text = out.read_text()
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", text
    lines = sorted(line.split() for line in text.splitlines() if line[:1].isdigit())
    # twice (srun, mpirun): rank r of 2 on node n<r+1>, allreduce 1 + 2 = 3
    assert lines == [["0", "2", "n1", "3"]] * 2 + [["1", "2", "n2", "3"]] * 2, text


def test_cluster_stop_ends_daemons_and_running_jobs_and_removes_its_directory(tmp_path):
    cluster = start_cluster()
    try:
        daemons = {name: proc.pid for name, proc in cluster.daemons.items()}
        assert sorted(daemons) == ["munged", "slurmctld", "slurmd-n1", "slurmd-n2"]
        job = cluster.sbatch(["-N", "2", f"--output={tmp_path}/sleep.out", "--wrap", "srun sleep 300"])
        cluster.wait_job(job, 30, frozenset({"RUNNING"}))
        deadline = time.monotonic() + 20
        while len(pids_with_env("SLURM_CONF", str(cluster.conf))) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)  # slurmstepd + srun + 2 x sleep
        job_pids = pids_with_env("SLURM_CONF", str(cluster.conf))
        assert len(job_pids) >= 4, job_pids
    finally:
        cluster.stop()
    alive = [pid for pid in [*daemons.values(), *job_pids] if is_running(pid)]
    assert not alive and not cluster.root.exists(), alive


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from dlrm.data.synthetic.criteo import preset_cardinalities
    from dlrm.data.synthetic.generator import generate_dataset

    path = tmp_path_factory.mktemp("dataset") / "tiny"
    generate_dataset(str(path), preset_cardinalities("tiny"), TRAIN_ROWS, TEST_ROWS, seed=7)
    return path


@pytest.fixture(scope="module")
def two_node_jobs(slurm_cluster, dataset, tmp_path_factory):
    """Submit the template twice with the same flags; requeue the second while it runs."""
    work = tmp_path_factory.mktemp("sbatch")
    env = job_env(work, dataset)
    jobs = {name: submit_template(slurm_cluster, work, name, env, TRAINER_FLAGS, ["--time=10"])
            for name in ("plain", "requeued")}

    # Requeue the second job once it has written a periodic checkpoint, before it can finish.
    requeued = jobs["requeued"]
    latest = requeued["dir"] / "checkpoints" / "latest"
    wait_for(slurm_cluster, requeued, "its first checkpoint", latest.exists)
    requeued["checkpoint_at_requeue"] = int(latest.read_text().strip().split("_")[1])
    requeued["logged_at_requeue"] = last_logged_step(requeued["dir"])
    slurm_cluster.run(["scontrol", "requeue", requeued["id"]])
    release_requeued(slurm_cluster, requeued)

    for job in jobs.values():
        job["info"] = slurm_cluster.wait_job(job["id"], timeout=240)
    return jobs


def test_sbatch_template_trains_sharded_on_two_nodes(slurm_cluster, two_node_jobs):
    job = two_node_jobs["plain"]
    report = job_report(slurm_cluster, job["dir"], job["out"])
    info = job["info"]
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", report
    assert info["NumNodes"] == "2" and info["NodeList"] == "n[1-2]", info
    # both ranks ran (one log per rank) and rank 0 reported the world size
    assert sorted(p.name for p in (job["dir"] / "logs").glob("rank-*.log")) == ["rank-0.log", "rank-1.log"]
    assert "restart 0: 2 nodes (n[1-2]) x 1 tasks, launcher srun" in (job["dir"] / "logs" / "batch.log").read_text()
    # the stack's backend under srun: the MPI backend (mpi4py over PMIx), or Horovod on the Horovod stack
    assert f"world size 2 ({STACK_BACKEND})" in (job["dir"] / "logs" / "rank-0.log").read_text(), report
    # the template recorded the rank command, shell-quoted: main.py with the flags it was given
    command = shlex.split((job["dir"] / "command.txt").read_text())
    assert command[:2] == [PYTHON, str(ROOT / "main.py")] and command[-len(TRAINER_FLAGS):] == TRAINER_FLAGS, command
    # logged AUC: a real evaluation of the trained model
    last = final_eval(job["dir"])
    assert last["step"] == 40 and 0.6 < last["auc"] <= 1.0 and math.isfinite(last["logloss"]), last
    # checkpoint: complete, written by 2 ranks, tables placed on both ranks by the planner
    checkpoints = job["dir"] / "checkpoints"
    step_dir = checkpoints / (checkpoints / "latest").read_text().strip()
    meta = json.loads((step_dir / "meta.json").read_text())
    assert meta["step"] == 40 and meta["world_size"] == 2
    owners = {piece["rank"] for table in meta["plan"]["tables"] for piece in table["pieces"]}
    assert owners == {0, 1}, "embedding tables are not sharded over both ranks"
    assert sorted(os.listdir(step_dir / "embedding")) and (step_dir / "dense").is_dir()


def test_requeued_job_checkpoints_on_sigterm_and_resumes_from_that_step(slurm_cluster, two_node_jobs):
    plain, requeued = two_node_jobs["plain"], two_node_jobs["requeued"]
    report = job_report(slurm_cluster, requeued["dir"], requeued["out"])
    info = requeued["info"]
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", report
    assert info["Restarts"] == "1", info
    # the batch script ran twice (appending to its output), the second time with the checkpoint
    batch_log = requeued["out"].read_text()
    assert "restart 0:" in batch_log and "restart 1:" in batch_log, batch_log
    assert f"job {requeued['id']}: SIGTERM" in batch_log, batch_log
    # the ranks stopped on Slurm's SIGTERM at a step boundary no earlier than what was logged or
    # checkpointed when the requeue was sent, and checkpointed that very step ...
    stops = stop_records(requeued["dir"])
    assert len(stops) == 1 and stops[0][1] == "received SIGTERM", (stops, report)
    stopped_at = stops[0][0]
    assert max(requeued["checkpoint_at_requeue"], requeued["logged_at_requeue"]) <= stopped_at < 40, (stops, requeued)
    assert stopped_at in checkpoint_steps(requeued["dir"]), report
    # ... and the requeued job resumed from it: not from step 0, not from an older periodic checkpoint
    assert restored_steps(requeued["dir"]) == [stopped_at], report
    # same evaluation as the uninterrupted job
    got, want = final_eval(requeued["dir"]), final_eval(plain["dir"])
    assert got["step"] == want["step"] == 40
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-6)
    assert got["logloss"] == pytest.approx(want["logloss"], rel=1e-5)


@pytest.fixture(scope="module")
def time_limit_job(slurm_cluster, dataset, tmp_path_factory):
    """A job that trains "forever" meets its time limit: the limit is brought close once training runs,
    Slurm's warning makes it checkpoint and requeue itself; once it trains again it is cancelled."""
    work = tmp_path_factory.mktemp("timelimit")
    flags = [*TRAINER_FLAGS[:TRAINER_FLAGS.index("--max_steps")], "--max_steps", "1000000",
             *TRAINER_FLAGS[TRAINER_FLAGS.index("--max_steps") + 2:]]
    # The template's own --signal (B:USR1@300), given again so the test states what it relies on.
    job = submit_template(slurm_cluster, work, "timelimit", job_env(work, dataset), flags,
                          ["--time=10", "--signal=B:USR1@300"])
    wait_for(slurm_cluster, job, "a logged training step", lambda: records(job["dir"], "train"))
    # Slurm sends the warning when the end is at most 300 s (+ its 30 s check period) away: move the
    # end 3 to 4 minutes ahead. The warning comes within one check period; the limit itself never hits.
    minutes = run_seconds(slurm_cluster.job_info(job["id"])) // 60 + 4
    slurm_cluster.run(["scontrol", "update", f"JobId={job['id']}", f"TimeLimit={minutes}"])
    # the job checkpoints and requeues itself; restore its limit for the restart (a real limit is
    # the same again for every start), else the restart is warned at once
    release_requeued(slurm_cluster, job, "TimeLimit=10")
    job["stops_before_restart"] = stop_records(job["dir"])
    first_run_steps = last_logged_step(job["dir"])
    wait_for(slurm_cluster, job, "training after the restart",
             lambda: last_logged_step(job["dir"]) > first_run_steps)
    job["restored"] = restored_steps(job["dir"])
    slurm_cluster.run(["scancel", job["id"]])
    job["info"] = slurm_cluster.wait_job(job["id"], timeout=120)
    return job


def test_time_limit_warning_checkpoints_requeues_and_resumes(slurm_cluster, time_limit_job):
    job = time_limit_job
    report = job_report(slurm_cluster, job["dir"], job["out"])
    # the warning reached the batch script, which forwarded it and requeued the job
    batch_log = job["out"].read_text()
    assert f"job {job['id']}: SIGUSR1" in batch_log, batch_log
    # every rank exited with 128 + SIGUSR1 by itself (none was ended by the launcher)
    assert "the ranks stopped (status 138) after the warning; requeueing" in batch_log, batch_log
    # the ranks stopped on it at a step boundary and checkpointed that step; the restart resumed from it
    assert len(job["stops_before_restart"]) == 1, report
    warned_at, reason = job["stops_before_restart"][0]
    assert reason == f"received {WARNING_SIGNAL}" and warned_at > 0, report
    assert warned_at in checkpoint_steps(job["dir"]), report
    assert job["restored"] == [warned_at], report
    # scancel: SIGTERM, one more checkpoint at a later step, and the job ends cancelled, not requeued
    info = job["info"]
    assert info["JobState"].split()[0] == "CANCELLED" and info["Restarts"] == "1", info
    stops = stop_records(job["dir"])
    assert len(stops) == 2 and stops[1][1] == "received SIGTERM" and stops[1][0] > warned_at, (stops, report)
    assert stops[1][0] in checkpoint_steps(job["dir"]), report


WIDEDEEP_ROWS = 6000
WIDEDEEP_FLAGS = [
    "--arch", "widedeep", "--deep_hidden_units", "16", "8", "--global_batch_size", "256",
    "--eval_batch_size", "1024", "--num_epochs", "1", "--deep_warmup_epochs", "0.2", "--log_every", "5",
    "--intra_op_threads", "1", "--inter_op_threads", "1", "--skip_data_validation",
]


@pytest.fixture(scope="module")
def widedeep_job(slurm_cluster, tmp_path_factory):
    """The template with --arch widedeep on a small synthetic click log (displays, multi-hot features)."""
    from dlrm.data.synthetic.widedeep_generator import generate_widedeep

    dataset = tmp_path_factory.mktemp("wd_dataset") / "widedeep"
    generate_widedeep(str(dataset), "widedeep_tiny", rows=WIDEDEEP_ROWS, seed=3)
    work = tmp_path_factory.mktemp("wd_sbatch")
    job = submit_template(slurm_cluster, work, "widedeep", job_env(work, dataset), WIDEDEEP_FLAGS, ["--time=10"])
    job["info"] = slurm_cluster.wait_job(job["id"], timeout=240)
    return job


def test_sbatch_template_trains_wide_and_deep_sharded_on_two_nodes(slurm_cluster, widedeep_job):
    job = widedeep_job
    report = job_report(slurm_cluster, job["dir"], job["out"])
    info = job["info"]
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", report
    # the stack's backend under srun: the MPI backend (mpi4py over PMIx), or Horovod on the Horovod stack
    assert f"world size 2 ({STACK_BACKEND})" in (job["dir"] / "logs" / "rank-0.log").read_text(), report
    last = final_eval(job["dir"])  # MAP@12 over the test displays, exact across both ranks' rows
    assert 0.0 < last["map_at_12"] <= 1.0 and last["groups"] > 0 and math.isfinite(last["logloss"]), last
    checkpoints = job["dir"] / "checkpoints"
    meta = json.loads((checkpoints / (checkpoints / "latest").read_text().strip() / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["model_shape"]["arch"] == "widedeep"
    owners = {table["name"]: {piece["rank"] for piece in table["pieces"]} for table in meta["plan"]["tables"]}
    wide = [name for name in owners if name.endswith("_wide")]
    assert len(wide) == len(owners) // 2 > 0, sorted(owners)
    assert set().union(*owners.values()) == {0, 1}, "the tables are not sharded over both ranks"
