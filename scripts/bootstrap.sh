#!/usr/bin/env bash
# Creates .venv with the whole pinned stack, Debian packages included, once.
# Later calls are a no-op (a stamp keyed on this script and requirements.txt).
# Used by `make demo`, `make test` and .ci/run, so a fresh machine needs nothing else.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DLRM_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
key="$(cat "$root/scripts/bootstrap.sh" "$root/requirements.txt" | sha256sum | cut -c1-16)"
stamp="$venv/.bootstrap-$key"
[ -f "$stamp" ] && exit 0

log() { echo "[bootstrap] $*" >&2; }

# --- Debian packages: MPI for Horovod/mpi4py, cmake to build Horovod, Slurm + munge for the launcher tests.
debs=(libopenmpi-dev openmpi-bin cmake g++ slurm-wlm munge)
missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's slurm packages may start daemons on install; tests start their own, on private ports.
for svc in slurmctld slurmd munge; do pkill -x "$svc" 2>/dev/null || true; done

# --- Python environment
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip
log "installing requirements.txt"
"${pip[@]}" install -r "$root/requirements.txt"

# --- Horovod from source against the installed TF (no cache: a wheel built against another TF fails at import).
if ! "$venv/bin/python" -c "import horovod.tensorflow" 2>/dev/null; then
  log "building horovod 0.28.1 with TensorFlow + Gloo + MPI (about 5 minutes on 2 cores)"
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  MAKEFLAGS="-j$(nproc)" \
    "${pip[@]}" install --no-cache-dir --no-build-isolation horovod==0.28.1
fi
"$venv/bin/horovodrun" --check-build | sed 's/^/[bootstrap] /' >&2
# The project itself, editable, so `import dlrm` works from any directory (subprocesses, Slurm jobs).
"${pip[@]}" install --no-deps --no-build-isolation -e "$root"
touch "$stamp"
log "environment ready: $venv"
