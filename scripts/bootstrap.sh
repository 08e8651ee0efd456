#!/usr/bin/env bash
# Creates the virtual environment of one pinned stack, Debian packages included, once:
#   DLRM_STACK=current (default): TensorFlow 2.21 + tf-keras, numpy 2, mpi4py; requirements.txt; .venv
#   DLRM_STACK=horovod:           TensorFlow 2.15 + Horovod 0.28.1 from source; requirements-horovod.txt; .venv-horovod
# DLRM_VENV chooses another directory. Later calls are a no-op (a stamp keyed on this script and the stack's
# requirement files). Used by `make demo`, `make test` and .ci/run, so a fresh machine needs nothing else.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stack="${DLRM_STACK:-current}"
log() { echo "[bootstrap] $*" >&2; }
case "$stack" in
  current) requirements=("$root/requirements.txt" "$root/requirements-nodeps.txt"); default_venv="$root/.venv" ;;
  horovod) requirements=("$root/requirements-horovod.txt"); default_venv="$root/.venv-horovod" ;;
  *) log "DLRM_STACK must be current or horovod, got '$stack'"; exit 1 ;;
esac
venv="${DLRM_VENV:-$default_venv}"
python="${PYTHON:-python3}"
key="$(cat "$root/scripts/bootstrap.sh" "${requirements[@]}" | sha256sum | cut -c1-16)"
stamp="$venv/.bootstrap-$key"
# A venv holds one stack: never install one stack over the other (TensorFlow 2.21 over a Horovod build).
built="$(cat "$venv/.dlrm-stack" 2>/dev/null || { [ -x "$venv/bin/horovodrun" ] && echo horovod; } || true)"
if [ -n "$built" ] && [ "$built" != "$stack" ]; then
  log "$venv holds the $built stack, not the $stack stack: use it with DLRM_STACK=$built DLRM_VENV=$venv," \
      "or remove it to build the $stack stack there"
  exit 1
fi
python_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
# The Python the stack will run on: the venv's own once it exists (a venv keeps the Python it was made
# with, so an interpreter asked for by PYTHON must be that one), else $python. Checked before anything is
# installed. The current stack's pins have wheels for 3.11-3.13 (numpy 2.4, pyarrow 26, matplotlib 3.11 and
# onnxruntime 1.32 dropped 3.10, which reached its end of life in October 2026); TensorFlow 2.15 (and
# Horovod 0.28.1's build) for 3.10-3.11 only.
if [ -x "$venv/bin/python" ]; then
  interpreter="$venv/bin/python" hint="remove $venv and set PYTHON=..."
  version="$(python_version "$interpreter")" || version="unknown"
  if [ -n "${PYTHON:-}" ]; then
    asked="$(python_version "$python")" || { log "PYTHON=$python does not run"; exit 1; }
    if [ "$asked" != "$version" ]; then
      log "$venv was made with Python $version, not $asked (PYTHON=$python): remove it, or build another" \
          "environment with DLRM_VENV=... (make VENV=...)"
      exit 1
    fi
  fi
else
  interpreter="$python" hint="set PYTHON=..."
  version="$(python_version "$interpreter")" || { log "$python does not run (set PYTHON=...)"; exit 1; }
fi
case "$stack:$version" in
  current:3.1[1-3] | horovod:3.1[01]) ;;
  current:*) log "the current stack needs Python 3.11-3.13, $interpreter is $version ($hint)"; exit 1 ;;
  horovod:*) log "the Horovod stack needs Python 3.10 or 3.11, $interpreter is $version ($hint)"; exit 1 ;;
esac
[ -f "$stamp" ] && exit 0


# --- Debian packages: Open MPI (mpi4py's library, mpirun; Horovod's controller), python3-venv for
# `python3 -m venv` (Debian splits ensurepip out), Slurm + munge for the launcher tests, a JRE for Spark if
# none is found, libgomp1 for numba's OpenMP threading layer (the batch reader's decode threads), `make`
# for the Makefile (on a machine without it, run this script first); cmake + g++ to build Horovod.
debs=(libopenmpi-dev openmpi-bin make libgomp1 python3-venv slurm-wlm munge)
[ "$stack" = horovod ] && debs+=(cmake g++)
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

# --- Python environment (its version was checked above).
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  "$python" -m venv "$venv"
fi
echo "$stack" > "$venv/.dlrm-stack"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

# The project itself, editable, so `import dlrm` works from any directory (subprocesses, Slurm jobs).
finish() {
  "${pip[@]}" install --no-deps --no-build-isolation -e "$root"
  touch "$stamp"
  log "environment ready ($stack stack): $venv"
  exit 0
}
"${pip[@]}" install --upgrade pip
log "installing ${requirements[0]##*/} (the $stack stack)"
"${pip[@]}" install -r "${requirements[0]}"
if [ "$stack" = current ]; then
  "${pip[@]}" install --no-deps -r "${requirements[1]}"
  finish
fi

# --- Horovod from source against the installed TF (no cache: a wheel built against another TF fails at import).
if ! "$venv/bin/python" -c "import horovod.tensorflow" 2>/dev/null; then
  log "building horovod 0.28.1 with TensorFlow + Gloo + MPI (about 5 minutes on 2 cores)"
  # Horovod builds RelWithDebInfo: its `-g` makes the compile 35-43% dearer, for debug info nobody reads here.
  # HOROVOD_CMAKE names the cmake it runs: this one configures the same build without `-g`.
  cmake_dir="$(mktemp -d)"
  cat > "$cmake_dir/cmake" <<'CMAKE'
#!/usr/bin/env bash
[ "${1:-}" = --build ] && exec cmake "$@"
exec cmake "$@" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG"
CMAKE
  chmod +x "$cmake_dir/cmake"
  HOROVOD_CMAKE="$cmake_dir/cmake" \
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  MAKEFLAGS="-j$(nproc)" \
    "${pip[@]}" install --no-cache-dir --no-build-isolation --force-reinstall --no-deps horovod==0.28.1
  rm -rf "$cmake_dir"
fi
# --force-reinstall: after a TensorFlow change pip would otherwise keep the stale build ("already
# satisfied"); its build dependencies are in requirements-horovod.txt. Fail here, not in the first test.
"$venv/bin/python" -c "import horovod.tensorflow" || { log "horovod.tensorflow does not import after the build"; exit 1; }
"$venv/bin/horovodrun" --check-build | sed 's/^/[bootstrap] /' >&2
finish
