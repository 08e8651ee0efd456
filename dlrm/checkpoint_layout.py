"""Where a checkpoint is and what its meta.json records, readable without TensorFlow.

The command line (`dlrm.cli`) reads a checkpoint's model before TensorFlow loads, so the names of a
checkpoint root's entries, finding the complete checkpoint for a path and reading meta.json live here;
the checkpoint package (`dlrm.train.checkpoint`) builds on them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import List, Optional

from dlrm.config import Config, TrainConfig
from dlrm.errors import UserError

LATEST = "latest"
META = "meta.json"
STEP_DIR = re.compile(r"^step_(\d{8})$")
WRITING = ".tmp"  # `step_X.tmp`: a checkpoint being written
DELETING = ".deleting"  # `step_X.deleting`: a checkpoint being deleted
UNFINISHED = re.compile(rf"^step_\d{{8}}({re.escape(WRITING)}|{re.escape(DELETING)})$")  # left by a killed run


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be used (missing, incomplete, for a different model) or written (path)."""

    on_every_rank = True  # raised alike on every rank (or agreed first, see `protocol.raise_agreed`)


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def complete_checkpoints(root: str) -> List[str]:
    """Names of complete checkpoint directories under `root`, oldest first."""
    if not os.path.isdir(root):
        return []
    names = [name for name in os.listdir(root)
             if STEP_DIR.match(name) and os.path.isfile(os.path.join(root, name, META))]
    return sorted(names)


def find_checkpoint(path: str) -> Optional[str]:
    """A complete checkpoint directory for `path` (itself, or `latest` / the newest under a root)."""
    if os.path.isfile(os.path.join(path, META)) and not path.rstrip("/").endswith((WRITING, DELETING)):
        return path
    latest_file = os.path.join(path, LATEST)
    if os.path.isfile(latest_file):
        with open(latest_file, encoding="utf-8", errors="replace") as f:  # garbled: matches no step_* name
            name = f.read().strip()
        if STEP_DIR.match(name) and os.path.isfile(os.path.join(path, name, META)):
            return os.path.join(path, name)
    names = complete_checkpoints(path)  # `latest` missing or unusable: newest complete directory
    return os.path.join(path, names[-1]) if names else None


def restore_source(train_cfg: TrainConfig) -> Optional[str]:
    """The checkpoint a run starts from: its own (--save_checkpoint_path) if it holds one, else
    --restore_checkpoint_path (which must hold one), else none."""
    if train_cfg.save_checkpoint_path:
        found = find_checkpoint(train_cfg.save_checkpoint_path)
        if found:
            return found
    if train_cfg.restore_checkpoint_path:
        found = find_checkpoint(train_cfg.restore_checkpoint_path)
        if not found:
            raise CheckpointError(
                f"no complete checkpoint at --restore_checkpoint_path {train_cfg.restore_checkpoint_path}")
        return found
    return None


def read_meta(checkpoint_dir: str) -> dict:
    """The checkpoint's meta.json; a file that cannot be read or parsed is named in a CheckpointError."""
    path = os.path.join(checkpoint_dir, META)
    try:
        with open(path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"checkpoint {checkpoint_dir} is damaged: {path} cannot be read: "
                              f"{getattr(error, 'strerror', None) or error}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {checkpoint_dir} is damaged: {path} holds no JSON object")
    return meta


def recorded_config(checkpoint_dir: str) -> Optional[Config]:
    """The training configuration the checkpoint's meta.json records (None if it records none: not written by
    this trainer). A recorded value of the wrong type, or a model this version cannot build, is damage."""
    saved = read_meta(checkpoint_dir).get("config")
    if saved is None:
        return None
    try:
        config = Config.from_dict(saved)
        problems = _mistyped(config) or config.model.problems()
    except (TypeError, ValueError, AttributeError) as error:
        problems = [f"its configuration cannot be read ({error})"]
    if problems:
        raise CheckpointError(f"checkpoint {checkpoint_dir} is damaged: {os.path.join(checkpoint_dir, META)} "
                              f"records a configuration this version cannot use: {problems[0]}")
    return config


def _mistyped(config: Config) -> List[str]:
    """The fields of `config` whose value is not of their default's kind (fields defaulting to None unchecked)."""
    found = []
    defaults = Config()
    for section in dataclasses.fields(Config):
        for item in dataclasses.fields(getattr(defaults, section.name)):
            default = getattr(getattr(defaults, section.name), item.name)
            value = getattr(getattr(config, section.name), item.name)
            kind = (int, float) if isinstance(default, float) else type(default)
            if default is not None and value is not None and (not isinstance(value, kind) or
                                                              isinstance(value, bool) != isinstance(default, bool)):
                found.append(f"{section.name}.{item.name} is {value!r}")
    return found
