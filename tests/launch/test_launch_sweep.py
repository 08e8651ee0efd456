"""`python -m dlrm.launch`: sweep specs, submitit jobs on a real two-node Slurm, bounded waits, and
`--collect` turning finished runs into a table and a plot; plus the local executor (no Slurm)."""
from __future__ import annotations

import csv
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlrm.launch.spec import SpecError, load_spec
from dlrm.launch.submit import ExecutorOptions, job_command, make_executor, wait_for_jobs
from tests.support import ROOT
from tests.support.multirank import RANK_ENV
from tests.support.processes import kill_tree
from tests.support.slurm_cluster import KILL_WAIT_S, PARTITION

PYTHON = sys.executable
# Tiny runs: every flag given, so the run does not depend on the demo preset; the generator's own data
# skips the value check (tested on its own).
TINY_SPEC = """\
name: {name}
trainer_flags: [--global_batch_size, "256", --valid_batch_size, "1024", --top_mlp_dims, 16-1,
                --optimizer, adagrad, --learning_rate, "0.3", --warmup_steps, "0", --decay_start_step, "1000",
                --log_every, "5", --checkpoint_every, "20", --intra_op_threads, "1", --inter_op_threads, "1",
                --skip_data_validation]
bottom_mlp_hidden: [16]
grid:
  dataset:
    - {{name: tiny, synthetic_preset: tiny, synthetic_train_rows: 6144, synthetic_test_rows: 2048}}
  embedding_dim: {dims}
  world_size: {worlds}
  max_steps: [20]
"""


def write_spec(path: Path, name: str, dims: list, worlds: list) -> Path:
    path.write_text(TINY_SPEC.format(name=name, dims=dims, worlds=worlds))
    return path


def launch(args: list, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """`python -m dlrm.launch args`; on timeout it is killed with every process it started (a local executor's
    job and its ranks), so that none outlives the test."""
    proc = subprocess.Popen([PYTHON, "-m", "dlrm.launch", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def check_collected(sweep_dir: Path, expected_points: list) -> list:
    """--collect wrote a CSV with one finished row per point, a markdown table and a PNG plot."""
    with open(sweep_dir / "sweep_results.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["point"] for r in rows) == sorted(expected_points), rows
    for row in rows:
        assert row["status"] == "ok", row
        assert 0.55 < float(row["auc"]) <= 1.0, row
        assert float(row["samples_per_sec"]) > 0 and float(row["wall_seconds"]) > 0, row
        assert int(row["model_parameters"]) > int(row["embedding_parameters"]) > 0, row
        assert int(row["max_rank_embedding_bytes"]) >= int(row["mean_rank_embedding_bytes"]) > 0, row
        assert row["steps"] == "20"
    table = (sweep_dir / "sweep_results.md").read_text().splitlines()
    assert table[0].startswith("| point |") and len(table) == 2 + len(expected_points), table
    assert (sweep_dir / "sweep_scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return rows


# ------------------------------------------------------------------------------------ spec (fast)

def test_spec_grid_expands_to_trainer_flags_the_trainer_accepts(tmp_path):
    from dlrm.cli import parse_config

    spec = load_spec(str(write_spec(tmp_path / "s.yaml", "grid", [8, 16], [1, 2])))
    points = spec.points()
    assert [p.name for p in points] == ["tiny_d8_w1_s20", "tiny_d8_w2_s20", "tiny_d16_w1_s20", "tiny_d16_w2_s20"]
    flags = points[2].trainer_flags(spec, str(tmp_path / "p"))
    config = parse_config(job_command(str(tmp_path / "p"), flags)[2:])  # what the job runs: its directories added
    assert config.train.save_checkpoint_path == str(tmp_path / "p" / "checkpoints")
    assert config.model.embedding_dim == 16 and config.model.bottom_mlp == (16, 16)
    assert config.train.max_steps == 20 and config.data.synthetic_preset == "tiny"
    assert config.data.synthetic_dir == str(tmp_path / "p" / "data")


def test_a_checkout_without_the_launcher_scripts_gets_one_message(tmp_path, monkeypatch):
    import dlrm.launch.submit as submit

    monkeypatch.setattr(submit, "PROJECT_ROOT", str(tmp_path / "checkout"))  # no slurm/common.sh there
    with pytest.raises(ValueError, match=r"slurm/common.sh in .*checkout did not give the job's command \(exit 1\): "
                                         r".*common.sh: No such file"):
        job_command(str(tmp_path / "p"), ["--max_steps", "2"])


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("sweep_*.yaml")))
def test_example_specs_give_valid_trainer_flags(example, tmp_path):
    from dlrm.cli import parse_config

    spec = load_spec(str(ROOT / "examples" / example))
    points = spec.points()
    assert len(points) >= 2 and len({p.name for p in points}) == len(points)
    for point in points:
        point_dir = str(tmp_path / point.name)
        config = parse_config(job_command(point_dir, point.trainer_flags(spec, point_dir))[2:])
        assert config.model.embedding_dim == point.embedding_dim
        assert config.model.bottom_mlp[-1] == point.embedding_dim


def test_spec_errors_name_the_file_and_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid:\n  dataset:\n    - {name: x, path: /d}\n  embedding_dim: [8, -1]\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: grid\.embedding_dim: expected positive integers, got -1"):
        load_spec(str(bad))
    bad.write_text("grid:\n  dataset:\n    - {name: x}\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: grid\.dataset\[0\]: give exactly one of 'path'"):
        load_spec(str(bad))
    bad.write_text("grid:\n  dataset: [{name: x, path: /d}]\n  batch: [1]\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: grid: unknown axes \['batch'\]"):
        load_spec(str(bad))
    bad.write_text("grid:\n  dataset: [{name: x, path: /d}]\n  embedding_dim: [8]\n  embedding_dim: [16]\n")
    with pytest.raises(SpecError, match=r"bad\.yaml: not valid YAML: key 'embedding_dim' is given twice in one "
                                        r"mapping \(lines 3 and 4\)"):
        load_spec(str(bad))


def test_world_size_layout_over_nodes():
    options = ExecutorOptions(tasks_per_node=4)
    assert options.layout(1) == (1, 1) and options.layout(4) == (1, 4) and options.layout(8) == (2, 4)
    with pytest.raises(ValueError, match="not a multiple of --tasks_per_node 4"):
        options.layout(6)


def test_bad_trainer_flag_fails_before_anything_is_submitted(tmp_path):
    spec = write_spec(tmp_path / "s.yaml", "typo", [8], [1])
    spec.write_text(spec.read_text().replace("--log_every", "--log_evry"))
    proc = launch(["--sweep", str(spec), "--executor", "local", "--out", str(tmp_path / "out")],
                  dict(os.environ), timeout=60)
    assert proc.returncode == 2 and "trainer flags rejected" in proc.stderr, proc.stderr
    # one message: the command as the job would run it, and the parser's complaint about the misspelt flag
    [message] = [line for line in proc.stderr.splitlines() if "trainer flags rejected" in line]
    assert "--log_evry" in message and "--run_dir" in message and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out" / "tiny_d8_w1_s20").exists()


# ------------------------------------------------------------------------------------ real Slurm

@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    """This process (submitit submits from it) and the jobs talk to the test cluster."""
    env = dict(slurm_cluster.env, **RANK_ENV, OMPI_MCA_btl="self,tcp")
    for name in ("SLURM_CONF", "PATH", "OMPI_MCA_btl", *RANK_ENV):
        monkeypatch.setenv(name, env[name])
    return env


@pytest.mark.slurm
def test_submitit_two_node_job_and_bounded_wait_on_cancel(slurm_env, slurm_cluster, tmp_path):
    """A function on 2 nodes x 1 task through submitit + srun --mpi=pmix: each task sees its own rank
    in the launcher environment dlrm.dist reads. A cancelled job ends the wait (no accounting)."""
    from dlrm.dist import launcher_world

    options = ExecutorOptions(partition=PARTITION, timeout_min=5)
    executor = make_executor(options, str(tmp_path / "world"), nodes=2, tasks_per_node=1, name="world")
    job = executor.submit(launcher_world)
    outcome = wait_for_jobs({"world": job}, timeout_s=90, poll_s=0.5)
    assert outcome == {"world": "COMPLETED"}, outcome
    worlds = sorted(job.results(), key=lambda w: w.rank)
    assert [(w.rank, w.size, w.source) for w in worlds] == [(0, 2, "pmix"), (1, 2, "pmix")], worlds

    sleeper = make_executor(options, str(tmp_path / "sleep"), nodes=1, tasks_per_node=1, name="sleep")
    job = sleeper.submit(time.sleep, 600)
    slurm_cluster.wait_job(job.job_id, 30, frozenset({"RUNNING"}))
    slurm_cluster.run(["scancel", job.job_id])
    started = time.monotonic()
    outcome = wait_for_jobs({"sleep": job}, timeout_s=60, poll_s=0.5, result_grace_s=2)
    assert outcome["sleep"].startswith("CANCELLED without a result"), outcome
    # submitit's job process ignores SIGTERM (it waits for a requeue signal), so SIGKILL ends it KillWait later
    assert time.monotonic() - started < KILL_WAIT_S + 30


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_sweep_and_collect(slurm_env, tmp_path):
    """Two points (embedding dims 8 and 16), each a 2-rank job on both nodes, then --collect."""
    spec = write_spec(tmp_path / "sweep.yaml", "slurm_sweep", [8, 16], [2])
    out = tmp_path / "sweep"
    proc = launch(["--sweep", str(spec), "--out", str(out), "--partition", PARTITION, "--timeout_min", "5",
                   "--wait_timeout", "240"], slurm_env, timeout=300)
    logs = "\n".join(p.read_text()[-2000:] for p in out.glob("*/submitit/*.err")) if out.exists() else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    assert "2/2 runs completed" in proc.stdout
    proc = launch(["--collect", str(out)], slurm_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = check_collected(out, ["tiny_d8_w2_s20", "tiny_d16_w2_s20"])
    by_dim = {int(r["embedding_dim"]): r for r in rows}
    assert int(by_dim[16]["embedding_parameters"]) == 2 * int(by_dim[8]["embedding_parameters"])
    # the planner split the tables over 2 ranks: each holds about half
    assert int(by_dim[8]["max_rank_embedding_bytes"]) < int(by_dim[8]["embedding_parameters"]) * 8 * 0.75


@pytest.mark.multirank
@pytest.mark.slow
def test_local_executor_sweep_without_slurm(tmp_path):
    """--executor local: one process per point starting the stack's launcher (slurm/run_single_node.sh:
    mpirun, or horovodrun on the Horovod stack)."""
    spec = write_spec(tmp_path / "sweep.yaml", "local_sweep", [8], [2])
    out = tmp_path / "sweep"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMIX_"))}
    env.update(RANK_ENV)
    proc = launch(["--sweep", str(spec), "--executor", "local", "--out", str(out), "--timeout_min", "4",
                   "--wait_timeout", "200"], env, timeout=240)
    logs = "\n".join(p.read_text()[-3000:] for p in out.glob("*/logs/*.log"))
    assert proc.returncode == 0, proc.stdout + proc.stderr + logs
    assert launch(["--collect", str(out)], env, timeout=120).returncode == 0
    check_collected(out, ["tiny_d8_w2_s20"])
    # run_single_node.sh recorded the rank command: the point's trainer flags after the launcher's own
    point = json.loads((out / "tiny_d8_w2_s20" / "point.json").read_text())
    command = shlex.split((out / "tiny_d8_w2_s20" / "command.txt").read_text())
    assert command[-len(point["trainer_flags"]):] == point["trainer_flags"], command
    checkpoints = out / "tiny_d8_w2_s20" / "checkpoints"
    meta = json.loads((checkpoints / (checkpoints / "latest").read_text().strip() / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["step"] == 20
