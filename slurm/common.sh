# shellcheck shell=bash
# Shared by dlrm_multinode.sbatch and run_single_node.sh (sourced, not run): environment defaults for
# Horovod / NCCL / Gloo / Open MPI, the per-job directory, and the one trainer command both launchers
# start on every rank. Every default below can be overridden by exporting the variable beforehand.
#
# Inputs (environment):
#   DLRM_ROOT              project checkout holding main.py (required; the launchers set it)
#   DLRM_PYTHON            interpreter (default: $DLRM_ROOT/.venv/bin/python, .venv-horovod with DLRM_STACK=horovod,
#                          if present, else python3)
#   DLRM_DATASET           split-binary dataset directory; empty = the trainer's synthetic dataset
#   DLRM_JOB_DIR           per-job directory: metrics (run dir), logs/, checkpoints/ (launchers set it)
#   DLRM_CHECKPOINT_EVERY  steps between checkpoints (default 1000); at most what a job loses when its
#                          ranks are killed without a signal first (SIGKILL, node failure)

dlrm_env_defaults() {
  # --- Horovod: stall check and shutdown, from the file the trainer reads too (one place).
  dlrm_horovod_defaults
  # --- NCCL (GPU collectives): warnings only; NCCL_DEBUG=INFO prints the chosen transports/rings.
  # If NCCL picks the wrong network interface (docker0, lo), set NCCL_SOCKET_IFNAME=ib0 or eth0.
  export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
  # --- Gloo (horovodrun --gloo, CPU collectives): same interface rule; unset = Horovod's choice.
  # export HOROVOD_GLOO_IFACE=eth0
  # --- Open MPI (Horovod's controller under srun/mpirun): the openib BTL is deprecated in Open MPI 4
  # and only prints warnings next to UCX on InfiniBand nodes. On the two fake nodes of the test
  # cluster (two slurmd on one host) shared memory between "nodes" crashes: the tests export
  # OMPI_MCA_btl=self,tcp, which this default leaves alone.
  export OMPI_MCA_btl="${OMPI_MCA_btl:-^openib}"
  # --- Threads: one process per GPU; CPU-side math gets the CPUs Slurm gave the task.
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}"
  export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"
  export PYTHONUNBUFFERED=1
  # GPU pinning is not done here: the trainer's TensorFlow set-up makes each rank see the GPU of its
  # local rank (from OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID), so every task can see all GPUs of its node.
}

# dlrm_horovod_defaults: exports each NAME=value of dlrm/horovod_defaults.env that is not set already.
dlrm_horovod_defaults() {
  local name value
  while IFS='=' read -r name value; do
    case "$name" in ''|'#'*) continue ;; esac
    if [ -z "${!name:-}" ]; then
      export "$name=$value"
    fi
  done < "$DLRM_ROOT/dlrm/horovod_defaults.env"
}

dlrm_resolve_python() {
  if [ -n "${DLRM_PYTHON:-}" ]; then
    return
  fi
  local venv="$DLRM_ROOT/.venv"  # the current stack's; DLRM_STACK=horovod: the Horovod stack's (docs/stack.md)
  if [ "${DLRM_STACK:-current}" = horovod ]; then
    venv="$DLRM_ROOT/.venv-horovod"
  fi
  if [ -x "$venv/bin/python" ]; then
    DLRM_PYTHON="$venv/bin/python"
  else
    DLRM_PYTHON=python3
  fi
  export DLRM_PYTHON
}

# dlrm_run [trainer flags...]: prints the run those flags select, as the trainer names it: the --mode
# (train unless --mode or --evaluate), or "train --benchmark". The trainer takes no abbreviated flag.
dlrm_run() {
  local mode=train previous="" benchmark=""
  for arg in "$@"; do
    case "$arg" in
      --mode=*) mode=${arg#--mode=} ;;
      --evaluate) mode="eval" ;;
      --benchmark) benchmark=1 ;;
      *) if [ "$previous" = --mode ]; then mode=$arg; fi ;;
    esac
    previous=$arg
  done
  if [ "$mode" = train ] && [ -n "$benchmark" ]; then
    mode="train --benchmark"
  fi
  echo "$mode"
}

# dlrm_job_command [extra trainer flags...]: fills the array DLRM_CMD with the command every rank of a
# job in $DLRM_JOB_DIR runs, and nothing else (the sweep launcher checks a point's command with it before
# submitting). Metrics go to $DLRM_JOB_DIR, checkpoints to $DLRM_JOB_DIR/checkpoints. A requeued or
# resubmitted job finds its checkpoints there and the trainer resumes from them by itself (a run whose
# --save_checkpoint_path holds a complete checkpoint continues from it): no second mechanism.
dlrm_job_command() {
  local ckpt="$DLRM_JOB_DIR/checkpoints"
  DLRM_CMD=("$DLRM_PYTHON" "$DLRM_ROOT/main.py" --run_dir "$DLRM_JOB_DIR")
  # The trainer refuses a flag that would change nothing: checkpoints are written in train mode only,
  # and the training benchmark reads and writes none.
  case "$(dlrm_run "$@")" in
    train) DLRM_CMD+=(--save_checkpoint_path "$ckpt" --checkpoint_every "${DLRM_CHECKPOINT_EVERY:-1000}") ;;
    "train --benchmark") ;;
    *) DLRM_CMD+=(--save_checkpoint_path "$ckpt") ;;
  esac
  if [ -n "${DLRM_DATASET:-}" ]; then
    DLRM_CMD+=(--dataset_path "$DLRM_DATASET")
  fi
  DLRM_CMD+=("$@")
}

# dlrm_trainer_command [extra trainer flags...]: the job's directories, and DLRM_CMD (dlrm_job_command).
dlrm_trainer_command() {
  if [ ! -f "$DLRM_ROOT/main.py" ]; then
    echo "error: $DLRM_ROOT/main.py not found; set DLRM_ROOT to the project checkout" >&2
    return 2
  fi
  local ckpt="$DLRM_JOB_DIR/checkpoints"
  mkdir -p "$DLRM_JOB_DIR/logs" "$ckpt"
  dlrm_job_command "$@"
  if [ -s "$ckpt/latest" ] && [[ " ${DLRM_CMD[*]} " == *" --save_checkpoint_path "* ]]; then
    echo "the trainer starts from $ckpt/$(cat "$ckpt/latest")"
  fi
}

# dlrm_record_command: writes DLRM_CMD, shell-quoted (re-runnable as is), to $DLRM_JOB_DIR/command.txt.
# Called once per job by the launchers, not by run_rank.sh: there every rank would write the file.
dlrm_record_command() {
  { printf '%q ' "${DLRM_CMD[@]}"; echo; } > "$DLRM_JOB_DIR/command.txt"
}
