"""The Slurm launch path against a real two-node Slurm (tests/slurm_cluster.py).

- the cluster itself: a 2-node job whose ranks meet through `srun --mpi=pmix` and through `mpirun`;
- `sbatch -N 2 slurm/dlrm_multinode.sbatch`: trains with the embedding tables sharded over 2 ranks
  on 2 nodes; exit state, logged AUC, checkpoint and plan are checked;
- `scontrol requeue` of a running copy of that job: it restarts from its own checkpoint and ends with
  the same evaluation as the uninterrupted job.
The two training jobs run at the same time (each takes one CPU of each node) to keep the test short.
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
from multirank import RANK_ENV
from slurm_cluster import pids_with_env, is_running, slurm_cluster, start_cluster  # noqa: F401  (pytest fixture)

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "slurm" / "dlrm_multinode.sbatch"
PYTHON = sys.executable
# Through dlrm.dist (Horovod's MPI controller), the project's only way to MPI.
MPI_HELLO = """\
import os
import tensorflow as tf
from dlrm import dist
dist.init()
total = int(dist.allreduce_sum(tf.constant(dist.rank() + 1)).numpy())
print(dist.rank(), dist.size(), os.environ["SLURMD_NODENAME"], total, flush=True)
"""
# Tiny model and data: a 2-rank job takes well under a minute. Flags are given in full because with
# --dataset_path the trainer uses the reference defaults (batch 65536, ...).
TRAIN_ROWS, TEST_ROWS = 6144, 2048
TRAINER_FLAGS = [
    "--global_batch_size", "256", "--valid_batch_size", "1024", "--embedding_dim", "8",
    "--bottom_mlp_dims", "16-8", "--top_mlp_dims", "16-1", "--optimizer", "adagrad",
    "--learning_rate", "0.3", "--warmup_steps", "0", "--decay_start_step", "1000",
    "--max_steps", "40", "--log_every", "5", "--intra_op_threads", "1", "--inter_op_threads", "1",
]
CHECKPOINT_EVERY = "5"

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
    evals = [r for r in read_metrics(str(job_dir / METRICS_FILE)) if r["kind"] == "eval"]
    assert evals, f"no eval record in {job_dir}/metrics.jsonl"
    return evals[-1]


def job_report(cluster, job_dir: Path, out: Path) -> str:
    parts = [f"--- {out}", out.read_text(errors="replace")[-3000:] if out.exists() else "(missing)"]
    for log in sorted((job_dir / "logs").glob("*.log")) if (job_dir / "logs").exists() else []:
        parts += [f"--- {log}", log.read_text(errors="replace")[-3000:]]
    return "\n".join(parts) + "\n" + cluster.log_tail()


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
def two_node_jobs(slurm_cluster, tmp_path_factory):
    """Submit the template twice with the same flags; requeue the second while it runs."""
    from dlrm.data.criteo import preset_cardinalities
    from dlrm.data.synthetic import generate_dataset

    work = tmp_path_factory.mktemp("sbatch")
    dataset = work / "dataset"
    generate_dataset(str(dataset), preset_cardinalities("tiny"), TRAIN_ROWS, TEST_ROWS, seed=7)
    env = job_env(work, dataset)
    jobs = {}
    for name in ("plain", "requeued"):
        out = work / f"{name}.out"
        job_id = slurm_cluster.sbatch(["-N", "2", "--ntasks-per-node=1", "--time=10", f"--job-name={name}",
                                       f"--output={out}", str(TEMPLATE), *TRAINER_FLAGS],
                                      extra_env=env, cwd=str(work))
        jobs[name] = {"id": job_id, "out": out, "dir": work / "runs" / f"{name}-{job_id}"}

    # Requeue the second job once it runs and has written a checkpoint, before it can finish.
    requeued = jobs["requeued"]
    latest = requeued["dir"] / "checkpoints" / "latest"
    deadline = time.monotonic() + 150
    while not latest.exists():
        slurm_cluster.check_alive()
        state = slurm_cluster.job_state(requeued["id"])
        assert state in ("PENDING", "RUNNING", "CONFIGURING"), \
            f"job ended ({state}) before its first checkpoint\n" + job_report(slurm_cluster, requeued["dir"], requeued["out"])
        assert time.monotonic() < deadline, "no checkpoint after 150 s\n" + job_report(
            slurm_cluster, requeued["dir"], requeued["out"])
        time.sleep(0.2)
    requeued["checkpoint_at_requeue"] = latest.read_text().strip()
    slurm_cluster.run(["scontrol", "requeue", requeued["id"]])
    # Slurm holds a requeued batch job for ~2 minutes (BeginTime); release it sooner. Not at once:
    # slurmd revoked the job's old credential and refuses any credential of that job created in
    # the same or an earlier second (whole-second timestamps), so a restart allocated within the
    # second of the requeue fails with "Job credential revoked".
    slurm_cluster.wait_job(requeued["id"], 60, frozenset({"PENDING"}))
    slurm_cluster.run(["scontrol", "update", f"JobId={requeued['id']}", "StartTime=now+3"])

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
    assert "world size 2" in (job["dir"] / "logs" / "rank-0.log").read_text(), report
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


def test_requeued_job_resumes_from_its_checkpoint(slurm_cluster, two_node_jobs):
    plain, requeued = two_node_jobs["plain"], two_node_jobs["requeued"]
    report = job_report(slurm_cluster, requeued["dir"], requeued["out"])
    info = requeued["info"]
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", report
    assert info["Restarts"] == "1", info
    # the batch script ran twice (appending to its output), the second time with the checkpoint
    batch_log = requeued["out"].read_text()
    assert "restart 0:" in batch_log and "restart 1:" in batch_log, batch_log
    rank0 = (requeued["dir"] / "logs" / "rank-0.log").read_text()
    restored = [line for line in rank0.splitlines() if line.startswith("restored ")]
    assert len(restored) == 1, report
    restored_step = int(restored[0].split("(step ")[1].split(",")[0])
    assert 0 < restored_step < 40 and int(requeued["checkpoint_at_requeue"].split("_")[1]) <= restored_step, restored
    # same evaluation as the uninterrupted job
    got, want = final_eval(requeued["dir"]), final_eval(plain["dir"])
    assert got["step"] == want["step"] == 40
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-6)
    assert got["logloss"] == pytest.approx(want["logloss"], rel=1e-5)
