#!/bin/bash
# One rank of a training job that something else started (submitit's tasks under srun, see
# dlrm/launch/submit.py): the same environment defaults and trainer command as the sbatch template,
# for the job directory $DLRM_JOB_DIR.
#
#   DLRM_JOB_DIR=runs/x slurm/run_rank.sh [trainer flags...]
set -euo pipefail

DLRM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DLRM_ROOT
# shellcheck source=slurm/common.sh
source "$DLRM_ROOT/slurm/common.sh"
: "${DLRM_JOB_DIR:?set DLRM_JOB_DIR to the run directory}"
dlrm_resolve_python
dlrm_env_defaults
dlrm_trainer_command "$@"
exec "${DLRM_CMD[@]}"
