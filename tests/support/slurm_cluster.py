"""A real two-node Slurm cluster on this host, for the launcher tests.

Debian's `slurm-wlm` + `munge` (installed by scripts/bootstrap.sh) run as: one `munged` on a private
socket, one `slurmctld` and two `slurmd -N n1` / `slurmd -N n2` daemons acting as two nodes (same
address, different ports). Everything (config, keys, state, spool, logs, pid files) lives in one
temporary directory; every port is picked free at start, so nothing collides with system daemons.

Daemons run in the foreground (`-D` / `-F`) as our own children, so they are stopped by the PIDs we
hold. Job processes that Slurm starts (slurmstepd and the tasks) are found by the private
`SLURM_CONF` path in their environment, which only processes started through this cluster carry,
and are killed by PID too. `stop()` does all of it and removes the directory even after a failure.

No accounting (`slurmdbd`) here: finished jobs stay visible to `scontrol` for `MinJobAge` seconds,
which is how `wait_job` reads their final state, always with a deadline.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from dlrm.launch import slurm_state
from dlrm.launch.slurm_state import FINAL_STATES

NODE_NAMES = ("n1", "n2")
CPUS_PER_NODE = 2
PARTITION = "debug"
# Seconds between the SIGTERM that ends a job (requeue, cancel, time limit) and SIGKILL: Slurm's default.
KILL_WAIT_S = 30
REQUIRED_BINARIES = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "scontrol", "sinfo")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_binaries() -> list:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [name for name in REQUIRED_BINARIES if shutil.which(name, path=path) is None]


@dataclass
class SlurmCluster:
    """A running private cluster; use `start_cluster()` to make one."""

    root: Path
    conf: Path
    env: dict  # environment for clients (sbatch, srun, scontrol, submitit) and for jobs
    daemons: dict = field(default_factory=dict)  # name -> Popen

    # --- client commands (every one bounded by a timeout)
    def run(self, argv: Sequence[str], timeout: float = 30, check: bool = True,
            extra_env: Optional[dict] = None, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
        env = dict(self.env, **(extra_env or {}))
        proc = subprocess.run(list(argv), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}\n"
                + self.log_tail()
            )
        return proc

    def sbatch(self, argv: Sequence[str], extra_env: Optional[dict] = None, cwd: Optional[str] = None) -> str:
        """Submit; returns the job id."""
        out = self.run(["sbatch", "--parsable", *argv], extra_env=extra_env, cwd=cwd).stdout.strip()
        return out.split(";")[0]

    def job_info(self, job_id: str) -> dict:
        """`scontrol show job` as a dict ({} once the job is unknown)."""
        return slurm_state.job_info(job_id, env=self.env)

    def job_state(self, job_id: str) -> str:
        return slurm_state.job_state(job_id, env=self.env)

    def wait_job(self, job_id: str, timeout: float, states: frozenset = FINAL_STATES) -> dict:
        """Poll until the job reaches one of `states`; fails (never hangs) past `timeout` or if a daemon dies."""
        deadline = time.monotonic() + timeout
        info: dict = {}
        while time.monotonic() < deadline:
            self.check_alive()
            info = self.job_info(job_id)
            if slurm_state.base_state(info) in states:
                return info
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} not in {sorted(states)} after {timeout} s: {info}\n{self.log_tail()}")

    def check_alive(self) -> None:
        dead = {name: proc.returncode for name, proc in self.daemons.items() if proc.poll() is not None}
        if dead:
            raise RuntimeError(f"Slurm daemons died: {dead}\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(parts)

    # --- shutdown
    def stop(self) -> None:
        """Cancel jobs, stop the daemons and every process started through this cluster, by PID."""
        if all(proc.poll() is None for proc in self.daemons.values()) and self.daemons:
            try:
                self.run(["scancel", "--full", "--user", str(os.getuid())], check=False, timeout=10)
            except subprocess.TimeoutExpired:
                pass
        stuck = []
        for name in (*(f"slurmd-{n}" for n in NODE_NAMES), "slurmctld", "munged"):
            proc = self.daemons.get(name)
            if proc is not None and not _terminate(proc):
                stuck.append(name)  # keep going: the job processes and the directory still go
        _kill_pids(pids_with_env("SLURM_CONF", str(self.conf)))
        shutil.rmtree(self.root, ignore_errors=True)
        if stuck:
            raise RuntimeError(f"Slurm daemons {stuck} survived SIGKILL (uninterruptible sleep?)")


def _terminate(proc: subprocess.Popen, grace: float = 10) -> bool:
    """SIGTERM, then SIGKILL after `grace` s; False if the process still lives after another `grace` s."""
    if proc.poll() is not None:
        return True
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            return False
    return True


def pids_with_env(name: str, value: str) -> list[int]:
    """PIDs of processes whose environment has name=value (ours: the private SLURM_CONF path)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and is_running(int(entry.name)):
            found.append(int(entry.name))
    return found


def is_running(pid: int) -> bool:
    """True while the process exists and is not a zombie (reparented job processes may stay zombies
    until the machine's init reaps them; they hold no resources)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill_pids(pids: Sequence[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(is_running(pid) for pid in alive):
            time.sleep(0.1)
        pids = alive


def _slurm_conf(root: Path, host: str, munge_socket: Path, ports: dict) -> str:
    nodes = "\n".join(
        f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={ports[name]} "
        f"CPUs={CPUS_PER_NODE} RealMemory=2000 State=UNKNOWN"
        for name in NODE_NAMES
    )
    return f"""\
# Private test cluster: two slurmd "nodes" on one host (tests/support/slurm_cluster.py).
ClusterName=dlrmtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports['ctld']}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
# One TmpFS per node, else the PMIx servers of the two fake nodes collide ("File exists").
TmpFS={root}/tmpfs/%n
PlugStackConfig={root}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# No default MPI plugin: scripts must ask for --mpi=pmix themselves, as on many real clusters.
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# The main scheduler every second (default 60 s): a released requeued job starts as soon as its
# StartTime passes instead of waiting for the next scheduling pass.
SchedulerParameters=sched_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
InactiveLimit=0
# Slurm's default: on requeue, cancel or time limit the ranks get SIGTERM and this long to write
# their checkpoint before SIGKILL (the tests' tiny checkpoints need far less, even on a loaded host).
KillWait={KILL_WAIT_S}
# Finished jobs stay visible to scontrol this long (there is no accounting to ask afterwards).
MinJobAge=900
SlurmctldTimeout=30
SlurmdTimeout=120
MessageTimeout=10
SlurmctldDebug=info
SlurmdDebug=info
{nodes}
PartitionName={PARTITION} Nodes={','.join(NODE_NAMES)} Default=YES MaxTime=INFINITE State=UP
"""


def start_cluster(start_timeout: float = 60) -> SlurmCluster:
    """Start munged, slurmctld and two slurmd nodes; return once both nodes are idle."""
    root = Path(tempfile.mkdtemp(prefix="dlrm-slurm-"))
    conf = root / "slurm.conf"
    inherited = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PMIX_", "PMI_", "OMPI_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited)}
    env["SLURM_CONF"] = str(conf)
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    cluster = SlurmCluster(root=root, conf=conf, env=env)
    try:
        _write_files(root, conf)
        munge_socket = root / "munge" / "munge.socket.2"
        _spawn(cluster, "munged", [
            "munged", "-F", "--force", f"--socket={munge_socket}", f"--key-file={root}/munge-key/munge.key",
            f"--pid-file={root}/run/munged.pid", f"--log-file={root}/log/munged.log",
            f"--seed-file={root}/munge-key/munged.seed",
        ])
        _wait_for(munge_socket.exists, 15, "munged socket", cluster)
        _spawn(cluster, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
        for name in NODE_NAMES:
            _spawn(cluster, f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(conf)])
        _wait_for(lambda: _nodes_idle(cluster), start_timeout, "two idle nodes", cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _write_files(root: Path, conf: Path) -> None:
    """Directories, munge key (its directory 0700, the socket's 0755) and slurm.conf."""
    os.chmod(root, 0o755)
    for sub in ("state", "run", "log", "munge", "munge-key", *(f"spool/{n}" for n in NODE_NAMES),
                *(f"tmpfs/{n}" for n in NODE_NAMES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o755)
    os.chmod(root / "munge-key", 0o700)
    key = root / "munge-key" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o600)
    (root / "plugstack.conf").write_text("")  # not the system's /etc/slurm/plugstack.conf
    host = socket.gethostname().split(".")[0]
    ports = {"ctld": _free_port(), **{name: _free_port() for name in NODE_NAMES}}
    conf.write_text(_slurm_conf(root, host, root / "munge" / "munge.socket.2", ports))


def _spawn(cluster: SlurmCluster, name: str, argv: list) -> None:
    """A daemon in the foreground, as our child (its own session: a Ctrl-C of pytest is not forwarded)."""
    with open(cluster.root / "log" / f"{name}.stdout", "wb") as log:
        cluster.daemons[name] = subprocess.Popen(argv, env=cluster.env, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True)


def _nodes_idle(cluster: SlurmCluster) -> bool:
    try:
        proc = cluster.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=5)
    except subprocess.TimeoutExpired:
        return False
    states = dict(line.split() for line in proc.stdout.splitlines() if line.strip())
    return all(states.get(name) == "idle" for name in NODE_NAMES)


def _wait_for(predicate, timeout: float, what: str, cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cluster.check_alive()
        if predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(f"Slurm test cluster: no {what} after {timeout} s\n{cluster.log_tail()}")
