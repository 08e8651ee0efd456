"""scripts/bootstrap.sh refuses an interpreter that cannot run the stack before it installs anything: one
`[bootstrap]` line, exit 1, the environment directory untouched. Fake interpreters (a shell script that
prints a version) stand for the Pythons this machine may not have; the checks run before any Debian
package or pip install, so these runs install nothing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT


def fake_python(path: Path, version: str) -> Path:
    """An executable that answers bootstrap's version question with `version`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def bootstrap(venv: Path, stack: str = "current", python: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "DLRM_STACK", "DLRM_VENV")}
    env.update(DLRM_STACK=stack, DLRM_VENV=str(venv))
    if python is not None:
        env["PYTHON"] = python
    return subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh")], env=env, capture_output=True,
                          text=True, timeout=60)


def assert_one_refusal(run: subprocess.CompletedProcess, *phrases: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1 and len(lines) == 1 and lines[0].startswith("[bootstrap] "), run.stderr
    for phrase in phrases:
        assert phrase in lines[0], (phrase, lines[0])


@pytest.mark.parametrize("stack, version, wanted", [("current", "3.10", "3.11-3.13"),
                                                    ("current", "3.14", "3.11-3.13"),
                                                    ("horovod", "3.12", "3.10 or 3.11")])
def test_a_python_outside_the_stack_s_range_is_refused_before_the_environment_is_made(tmp_path, stack, version,
                                                                                       wanted):
    venv = tmp_path / "venv"
    python = fake_python(tmp_path / "bin" / "python", version)
    run = bootstrap(venv, stack, str(python))
    assert_one_refusal(run, f"needs Python {wanted}", f"{python} is {version}", "set PYTHON=")
    assert not venv.exists()


def test_an_environment_made_with_another_python_is_not_reused_for_the_one_asked_for(tmp_path):
    venv = tmp_path / "venv"
    asked = "%d.%d" % sys.version_info[:2]
    made = "3.12" if asked == "3.11" else "3.11"  # a version other than the test's own interpreter's
    fake_python(venv / "bin" / "python", made)
    before = sorted(p.name for p in venv.rglob("*"))
    run = bootstrap(venv, python=sys.executable)
    assert_one_refusal(run, f"made with Python {made}, not {asked}", "DLRM_VENV=")
    assert sorted(p.name for p in venv.rglob("*")) == before  # no stamp, no stack mark, nothing installed


def test_an_interpreter_that_does_not_run_is_named(tmp_path):
    run = bootstrap(tmp_path / "venv", python=str(tmp_path / "no_such_python"))
    assert_one_refusal(run, "no_such_python does not run")
    assert not (tmp_path / "venv").exists()
