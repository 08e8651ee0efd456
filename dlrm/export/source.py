"""What an export starts from: the complete checkpoint, the training configuration it records and the
dataset's feature spec (only the spec: the data files are not read)."""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Optional

from dlrm.checkpoint_layout import recorded_config
from dlrm.config import Config
from dlrm.data.format.feature_spec import SPEC_FILE_NAME, FeatureSpec
from dlrm.export.errors import ExportError
from dlrm.train import checkpoint


@dataclass(frozen=True)
class ExportSource:
    directory: str  # the complete step_* directory, verified
    step: int
    world_size: int  # of the run that wrote it
    config: Config  # the training configuration, set up for one process in eval mode
    spec: FeatureSpec
    spec_dir: str


def find_checkpoint_dir(path: str) -> str:
    """The complete checkpoint at `path` (a step_* directory or a root holding one)."""
    if not os.path.exists(path):
        raise ExportError(f"checkpoint {path} does not exist")
    found = checkpoint.find_checkpoint(path)
    if found is None:
        raise ExportError(f"no complete checkpoint at {path}: neither a step_* directory with meta.json nor a "
                          f"checkpoint root holding one (a step_*.tmp directory is a write that did not finish)")
    return found


def serving_config(config: Config) -> Config:
    """The training configuration of a checkpoint, for a forward pass in one process: eval mode, no XLA (the
    SavedModel must not need a compiler), no export hook."""
    config = dataclasses.replace(config)
    config.train = dataclasses.replace(config.train, mode="eval", xla=False, saved_model_output_path=None)
    return config


def load_source(path: str, dataset_dir: Optional[str] = None) -> ExportSource:
    """The checkpoint at `path` with its configuration and the feature spec of `dataset_dir` (default: the
    dataset the checkpoint's run trained on)."""
    directory = find_checkpoint_dir(path)
    checkpoint.check_share(directory, rank=0, size=1)  # every file, before anything of it is used
    meta = checkpoint.read_meta(directory)
    recorded = recorded_config(directory)
    if recorded is None:
        raise ExportError(f"{directory}/{checkpoint.META} records no training configuration (a checkpoint of an "
                          f"older version): the model cannot be rebuilt from it")
    config = serving_config(recorded)
    spec_dir = dataset_dir or config.data.dataset_dir or config.data.synthetic_dir
    if not os.path.isfile(os.path.join(spec_dir, SPEC_FILE_NAME)):
        given = "--dataset_path" if dataset_dir else "the checkpoint's run (its --dataset_path)"
        raise ExportError(f"no {SPEC_FILE_NAME} in {spec_dir} (from {given}): the export needs the feature spec "
                          f"of the dataset the model was trained on for the names and widths of its inputs; pass "
                          f"--dataset_path DIR (a directory holding that {SPEC_FILE_NAME}; no data file is read)")
    spec = FeatureSpec.load(spec_dir).validate(check_files=False)
    return ExportSource(directory=directory, step=int(meta["step"]), world_size=int(meta.get("world_size", 1)),
                        config=config, spec=spec, spec_dir=spec_dir)


def describe(source: ExportSource) -> dict:
    """What the SavedModel's `serving_inputs.json` says about where it came from."""
    return {"checkpoint": os.path.abspath(source.directory), "step": source.step,
            "written_by_world_size": source.world_size, "arch": source.config.model.arch,
            "model": json.loads(json.dumps(dataclasses.asdict(source.config.model)))}
