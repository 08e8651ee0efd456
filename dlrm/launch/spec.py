"""Sweep specs: a YAML grid of training runs for model-size scaling experiments (pure Python).

```yaml
name: tiny_scaling                  # sweep name (default: the file name)
trainer_flags: [--global_batch_size, "256", --optimizer, adagrad]   # passed to every run
bottom_mlp_hidden: [64, 32]         # DLRM: bottom MLP = hidden layers + the point's embedding dim
grid:                               # every combination of these axes is one run
  dataset:                          # dataset variants: a split-binary path, or a synthetic preset
    - {name: t15, path: /data/criteo_t15, frequency_threshold: 15}
    - {name: tiny, synthetic_preset: tiny, synthetic_train_rows: 8192, synthetic_test_rows: 2048}
  embedding_dim: [16, 64]
  world_size: [1, 2]
  max_steps: [200]
```

Each point becomes one trainer command line (`point_flags`); the flags are parsed with the trainer's
own `dlrm.cli.parse_config` before anything is submitted, so a typo fails here and not in a queue.
"""
from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional

import yaml

GRID_AXES = ("dataset", "embedding_dim", "world_size", "max_steps")
DATASET_KEYS = {"name", "path", "frequency_threshold", "synthetic_preset", "synthetic_train_rows",
                "synthetic_test_rows", "synthetic_seed"}
SPEC_KEYS = {"name", "trainer_flags", "bottom_mlp_hidden", "grid"}
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


class SpecError(ValueError):
    """A sweep spec that cannot be run; the message names the file and the key."""


@dataclass(frozen=True)
class DatasetVariant:
    """One dataset of the sweep: a preprocessed directory (`path`) or the trainer's synthetic data."""

    name: str
    path: Optional[str] = None
    frequency_threshold: Optional[int] = None
    synthetic_preset: Optional[str] = None
    synthetic_train_rows: Optional[int] = None
    synthetic_test_rows: Optional[int] = None
    synthetic_seed: Optional[int] = None

    def flags(self, synthetic_dir: str) -> List[str]:
        if self.path:
            return ["--dataset_path", self.path]
        flags = ["--synthetic_dir", synthetic_dir]
        for key in ("synthetic_preset", "synthetic_train_rows", "synthetic_test_rows", "synthetic_seed"):
            value = getattr(self, key)
            if value is not None:
                flags += [f"--{key}", str(value)]
        return flags


@dataclass(frozen=True)
class SweepPoint:
    """One run of the grid."""

    name: str  # unique, usable as a directory name
    dataset: DatasetVariant
    embedding_dim: Optional[int]
    world_size: int
    max_steps: Optional[int]

    def trainer_flags(self, spec: "SweepSpec", point_dir: str) -> List[str]:
        """The trainer's flags for this point (without the run/checkpoint directories, which the
        launcher scripts derive from the job directory)."""
        flags = list(spec.trainer_flags)
        flags += self.dataset.flags(os.path.join(point_dir, "data"))
        if self.embedding_dim is not None:
            flags += ["--embedding_dim", str(self.embedding_dim)]
            if spec.bottom_mlp_hidden is not None:
                dims = [*spec.bottom_mlp_hidden, self.embedding_dim]
                flags += ["--bottom_mlp_dims", "-".join(str(d) for d in dims)]
        if self.max_steps is not None:
            flags += ["--max_steps", str(self.max_steps)]
        return flags

    def to_dict(self) -> dict:
        return {"name": self.name, "dataset": {k: v for k, v in vars(self.dataset).items() if v is not None},
                "embedding_dim": self.embedding_dim, "world_size": self.world_size, "max_steps": self.max_steps}


@dataclass
class SweepSpec:
    name: str
    source: str  # the file it came from (for error messages)
    trainer_flags: List[str] = field(default_factory=list)
    bottom_mlp_hidden: Optional[List[int]] = None
    datasets: List[DatasetVariant] = field(default_factory=list)
    embedding_dims: List[Optional[int]] = field(default_factory=lambda: [None])
    world_sizes: List[int] = field(default_factory=lambda: [1])
    max_steps: List[Optional[int]] = field(default_factory=lambda: [None])

    def points(self) -> List[SweepPoint]:
        points = []
        for dataset, dim, world, steps in itertools.product(
                self.datasets, self.embedding_dims, self.world_sizes, self.max_steps):
            parts = [dataset.name]
            if dim is not None:
                parts.append(f"d{dim}")
            parts.append(f"w{world}")
            if steps is not None:
                parts.append(f"s{steps}")
            points.append(SweepPoint("_".join(parts), dataset, dim, world, steps))
        return points


def _fail(source: str, where: str, message: str) -> SpecError:
    return SpecError(f"{source}: {where}: {message}")


def _positive_ints(source: str, where: str, values) -> List[int]:
    if not isinstance(values, list) or not values:
        raise _fail(source, where, f"expected a non-empty list of positive integers, got {values!r}")
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise _fail(source, where, f"expected positive integers, got {value!r}")
    return list(values)


def _dataset(source: str, index: int, entry) -> DatasetVariant:
    where = f"grid.dataset[{index}]"
    if not isinstance(entry, dict):
        raise _fail(source, where, f"expected a mapping with 'name' and 'path' or 'synthetic_preset', got {entry!r}")
    unknown = set(entry) - DATASET_KEYS
    if unknown:
        raise _fail(source, where, f"unknown keys {sorted(unknown)}; allowed: {sorted(DATASET_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(source, where, f"'name' must be letters, digits, '_', '-' or '.', got {name!r}")
    if bool(entry.get("path")) == bool(entry.get("synthetic_preset")):
        raise _fail(source, where, "give exactly one of 'path' (a split-binary dataset) or 'synthetic_preset'")
    for key in ("frequency_threshold", "synthetic_train_rows", "synthetic_test_rows", "synthetic_seed"):
        if key in entry and (not isinstance(entry[key], int) or isinstance(entry[key], bool)):
            raise _fail(source, f"{where}.{key}", f"expected an integer, got {entry[key]!r}")
    path = entry.get("path")
    if path is not None:
        path = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(source)), os.path.expanduser(path)))
    return DatasetVariant(name=name, path=path, frequency_threshold=entry.get("frequency_threshold"),
                          synthetic_preset=entry.get("synthetic_preset"),
                          synthetic_train_rows=entry.get("synthetic_train_rows"),
                          synthetic_test_rows=entry.get("synthetic_test_rows"),
                          synthetic_seed=entry.get("synthetic_seed"))


def parse_spec(data, source: str) -> SweepSpec:
    """A loaded YAML document -> SweepSpec (errors name `source` and the offending key)."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    unknown = set(data) - SPEC_KEYS
    if unknown:
        raise _fail(source, "top level", f"unknown keys {sorted(unknown)}; allowed: {sorted(SPEC_KEYS)}")
    name = data.get("name", os.path.splitext(os.path.basename(source))[0])
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(source, "name", f"must be letters, digits, '_', '-' or '.', got {name!r}")
    flags = data.get("trainer_flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, (str, int, float)) for f in flags):
        raise _fail(source, "trainer_flags", f"expected a list of strings, got {flags!r}")
    spec = SweepSpec(name=name, source=source, trainer_flags=[str(f) for f in flags])
    if "bottom_mlp_hidden" in data:
        spec.bottom_mlp_hidden = _positive_ints(source, "bottom_mlp_hidden", data["bottom_mlp_hidden"])
    grid = data.get("grid")
    if not isinstance(grid, dict):
        raise _fail(source, "grid", "missing, or not a mapping of axes")
    unknown = set(grid) - set(GRID_AXES)
    if unknown:
        raise _fail(source, "grid", f"unknown axes {sorted(unknown)}; allowed: {list(GRID_AXES)}")
    datasets = grid.get("dataset")
    if not isinstance(datasets, list) or not datasets:
        raise _fail(source, "grid.dataset", "expected a non-empty list of dataset variants")
    spec.datasets = [_dataset(source, i, entry) for i, entry in enumerate(datasets)]
    names = [d.name for d in spec.datasets]
    if len(set(names)) != len(names):
        raise _fail(source, "grid.dataset", f"dataset names must be unique, got {names}")
    if "embedding_dim" in grid:
        spec.embedding_dims = _positive_ints(source, "grid.embedding_dim", grid["embedding_dim"])
    if "world_size" in grid:
        spec.world_sizes = _positive_ints(source, "grid.world_size", grid["world_size"])
    if "max_steps" in grid:
        spec.max_steps = _positive_ints(source, "grid.max_steps", grid["max_steps"])
    return spec


def load_spec(path: str) -> SweepSpec:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as error:
        raise SpecError(f"{path}: cannot read the sweep spec: {error}") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{path}: not valid YAML: {error}") from None
    return parse_spec(data, path)
