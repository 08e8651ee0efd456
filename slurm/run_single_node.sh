#!/bin/bash
# Single-node DLRM training: N ranks on this machine (a workstation or one cluster node), the same
# trainer command, job directory and resume rule as slurm/dlrm_multinode.sbatch. The ranks start under
# horovodrun where Horovod is installed next to DLRM_PYTHON (the Horovod stack), else under mpirun (the
# current stack: the MPI backend).
#
#   slurm/run_single_node.sh -np N [extra trainer flags, e.g. --max_steps 1000 --embedding_dim 128]
#
# Environment (all optional): DLRM_PYTHON, DLRM_DATASET, DLRM_CHECKPOINT_EVERY as for the sbatch
# template, and
#   DLRM_JOB_DIR           the run's directory (default: $DLRM_ROOT/runs/local-<date>-<pid>); give an
#                          old run's directory to continue it from its last checkpoint
#   DLRM_LAUNCHER          horovodrun or mpirun (default: horovodrun if installed next to DLRM_PYTHON)
#   DLRM_HOROVOD_CONTROLLER  horovodrun's controller: gloo (default: no MPI needed) or mpi
#   DLRM_TIMEOUT           seconds before the whole run is killed (default: none)
set -euo pipefail

DLRM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export DLRM_ROOT
# shellcheck source=slurm/common.sh
source "$DLRM_ROOT/slurm/common.sh"

if [ "${1:-}" != "-np" ] || [ -z "${2:-}" ]; then
  echo "usage: $0 -np N [trainer flags...]" >&2
  exit 2
fi
num_proc="$2"
shift 2

DLRM_JOB_DIR="${DLRM_JOB_DIR:-$DLRM_ROOT/runs/local-$(date +%Y%m%d-%H%M%S)-$$}"
export DLRM_JOB_DIR
dlrm_resolve_python
dlrm_env_defaults
dlrm_trainer_command "$@"

horovodrun="$(dirname "$DLRM_PYTHON")/horovodrun"
launcher="${DLRM_LAUNCHER:-$([ -x "$horovodrun" ] && echo horovodrun || echo mpirun)}"
case "$launcher" in
  horovodrun)
    if [ ! -x "$horovodrun" ]; then
      echo "error: DLRM_LAUNCHER=horovodrun but Horovod is not installed next to $DLRM_PYTHON" \
           "(the Horovod stack: DLRM_STACK=horovod)" >&2
      exit 2
    fi
    run_args=(-np "$num_proc" -H "localhost:$num_proc")
    case "${DLRM_HOROVOD_CONTROLLER:-gloo}" in
      gloo) run_args+=(--gloo) ;;
      mpi)
        run_args+=(--mpi)
        if [ "$(id -u)" -eq 0 ]; then
          run_args+=(--mpi-args="--allow-run-as-root")
        fi
        ;;
      *) echo "error: DLRM_HOROVOD_CONTROLLER must be gloo or mpi" >&2; exit 2 ;;
    esac
    launch=("$horovodrun" "${run_args[@]}")
    ;;
  mpirun)
    # --oversubscribe: more ranks than cores is the user's choice here, not an error.
    run_args=(-np "$num_proc" --bind-to none --oversubscribe)
    if [ "$(id -u)" -eq 0 ]; then
      run_args+=(--allow-run-as-root)
    fi
    launch=(mpirun "${run_args[@]}")
    ;;
  *) echo "error: DLRM_LAUNCHER must be horovodrun or mpirun, got '$launcher'" >&2; exit 2 ;;
esac
timeout_cmd=()
if [ -n "${DLRM_TIMEOUT:-}" ]; then
  timeout_cmd=(timeout --kill-after=30 "$DLRM_TIMEOUT")
fi

echo "$num_proc ranks on this node ($launcher), job dir $DLRM_JOB_DIR"
dlrm_record_command
"${timeout_cmd[@]}" "${launch[@]}" "${DLRM_CMD[@]}" 2>&1 | tee -a "$DLRM_JOB_DIR/logs/$launcher.log"
