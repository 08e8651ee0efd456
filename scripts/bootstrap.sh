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

# --- Debian packages: MPI for Horovod, cmake + make + g++ to build it, python3-venv for `python3 -m venv`
# (Debian splits ensurepip out), Slurm + munge for the launcher tests, a JRE for Spark if none is found,
# libgomp1 for numba's OpenMP threading layer (the batch reader's decode threads; g++ pulls it in too).
# `make` is listed because Horovod's build needs it; on a machine without it, run this script first.
debs=(libopenmpi-dev openmpi-bin cmake make g++ libgomp1 python3-venv slurm-wlm munge)
command -v java >/dev/null 2>&1 || debs+=(openjdk-17-jre-headless)
missing=()
for p in "${debs[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { log "missing Debian packages ${missing[*]}: install them as root (no sudo here)"; exit 1; }
    sudo="sudo"
  fi
  log "installing Debian packages: ${missing[*]}"
  if ! { $sudo apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    log "apt-get could not install ${missing[*]} (no network or no apt source?): install them, then rerun"
    exit 1
  fi
fi
# No daemon is stopped here: the Slurm test fixture runs its own munged/slurmctld/slurmd on a private
# socket, free ports and a temporary directory, so daemons the packages may have started do not
# collide with it (and killing daemons by name could hit a real cluster's or another test run's).

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
    "${pip[@]}" install --no-cache-dir --no-build-isolation --force-reinstall --no-deps horovod==0.28.1
fi
# --force-reinstall: after a TensorFlow change pip would otherwise keep the stale build ("already
# satisfied"); its build dependencies are in requirements.txt. Fail here, not in the first test.
"$venv/bin/python" -c "import horovod.tensorflow" || { log "horovod.tensorflow does not import after the build"; exit 1; }
"$venv/bin/horovodrun" --check-build | sed 's/^/[bootstrap] /' >&2
# The project itself, editable, so `import dlrm` works from any directory (subprocesses, Slurm jobs).
"${pip[@]}" install --no-deps --no-build-isolation -e "$root"
touch "$stamp"
log "environment ready: $venv"
