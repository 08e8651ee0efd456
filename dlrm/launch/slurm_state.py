"""Job states straight from slurmctld (`scontrol`), for clusters without accounting.

submitit reads job states through `sacct`, which needs `slurmdbd`. Without it, a job that was
cancelled or killed never writes its result and `job.result()` waits forever. These helpers ask
slurmctld itself; it remembers finished jobs for `MinJobAge` seconds (default 300). Every call has
a timeout: Slurm clients retry for a long time when the controller is down.
"""
from __future__ import annotations

import subprocess
from typing import Mapping, Optional

# States after which a job will not run again by itself (a requeued job goes back to PENDING).
FINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE",
})
UNKNOWN = "UNKNOWN"  # slurmctld does not know the job (never existed, or purged after MinJobAge)


def parse_scontrol_record(line: str) -> dict:
    """One line of `scontrol -o show ...` (`Key=Value Key=Value ...`) -> dict.

    Free-text values containing spaces (e.g. `Reason=...`, `Command=... args`) are kept whole up
    to the next `Key=`.
    """
    info: dict = {}
    key = None
    for token in line.split():
        name, eq, value = token.partition("=")
        if eq and name[:1].isupper() and name.replace(":", "").replace("/", "").isalnum():
            key = name
            info[key] = value
        elif key is not None:
            info[key] += " " + token
    return info


def job_info(job_id: str, env: Optional[Mapping[str, str]] = None, timeout: float = 20) -> dict:
    """`scontrol show job` of one job as a dict; {} if slurmctld does not know the job."""
    try:
        proc = subprocess.run(["scontrol", "-o", "show", "job", str(job_id)], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"scontrol did not answer within {timeout} s: is slurmctld running?") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {}
    return parse_scontrol_record(lines[0])


def base_state(info: Mapping[str, str]) -> str:
    """The state of a `job_info` record without its detail (`CANCELLED by 0` -> CANCELLED); UNKNOWN if absent."""
    words = info.get("JobState", "").split()
    return words[0] if words else UNKNOWN


def job_state(job_id: str, env: Optional[Mapping[str, str]] = None, timeout: float = 20) -> str:
    """PENDING, RUNNING, COMPLETED, ... or UNKNOWN (see base_state)."""
    return base_state(job_info(job_id, env, timeout))
