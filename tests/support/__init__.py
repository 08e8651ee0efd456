"""Helpers shared by the tests: multi-rank launches, a private Slurm cluster, dataset builders."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root: commands and workers run from here
