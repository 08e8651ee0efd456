"""Where a run resumes from, and the one restore used by training, evaluation and the inference benchmark."""
from __future__ import annotations

import os
from typing import Callable, List, Optional, Tuple

from dlrm.checkpoint_layout import CheckpointError, complete_checkpoints, find_checkpoint, restore_source
from dlrm.train.build import Parts, optimizer_label
from dlrm.train.checkpoint.protocol import raise_failures, restore_checkpoint, verify_checkpoint


def _own_checkpoints(root: Optional[str]) -> List[str]:
    """The checkpoints of a run's own directory (none without one), the one to resume first (`latest`), then
    newest first."""
    first = find_checkpoint(root) if root else None
    if root is None or first is None:
        return []
    older = [os.path.join(root, name) for name in reversed(complete_checkpoints(root))]
    return [first] + [path for path in older if os.path.normpath(path) != os.path.normpath(first)]


def training_source(parts: Parts, say: Callable[[str], None]) -> Tuple[Optional[str], bool]:
    """(checkpoint training starts from, whether it is verified already): in the run's own directory
    (--save_checkpoint_path) the newest that verifies, each damaged one skipped with a message (`say`);
    else --restore_checkpoint_path, verified by `restore`. Raises if none of the run's own verifies."""
    candidates = _own_checkpoints(parts.config.train.save_checkpoint_path)
    if not candidates:
        return restore_source(parts.config.train), False
    newest_failures = None
    for number, candidate in enumerate(candidates):
        failures = verify_checkpoint(candidate, parts.group)
        if not failures:
            return candidate, True
        newest_failures = newest_failures or failures
        following = candidates[number + 1] if number + 1 < len(candidates) else None
        say(f"{failures[0].message}; " + (f"resuming from the next older checkpoint, {following}" if following
                                          else "no older checkpoint of this run is left"))
    raise_failures(parts.group, newest_failures or [],
                   "; no checkpoint of this run verifies (move the damaged ones away to start from the "
                   "beginning)")


def restore(parts: Parts, source: str, training: bool, verified: bool = False) -> dict:
    """Fill the parts from checkpoint `source` on every rank (verified first unless `verified`); returns its meta.

    For training: weights and optimizer state, all of them present, and the checkpoint must have been
    written with this optimizer and global batch. Otherwise (evaluation, inference): the weights only.
    """
    dense, _, held = parts.checkpoint_variables(with_optimizer=training)
    model_shape = parts.model_shape()
    if training:
        model_shape["optimizer"] = optimizer_label(parts.config)
    meta = restore_checkpoint(source, dense, held, model_shape=model_shape, strict=training,
                              group=parts.group, table_names=parts.table_names, verified=verified)
    if training:
        step = int(meta["step"])
        iterations = int(parts.training_optimizer().iterations.numpy())
        if iterations != step:
            raise CheckpointError(f"{source}: optimizer iterations {iterations} != step {step}")
        _check_same_global_batch(meta, source, parts.config.data.global_batch_size, step)
    return meta


def _check_same_global_batch(meta: dict, source: str, global_batch_size: int, step: int) -> None:
    """Refuse to resume with another --global_batch_size: the data position and the learning-rate schedule
    are counted in steps, so the same step means other rows and another point of the schedule.

    Checkpoints written before the field existed carry it in their saved configuration; one with neither
    is accepted (nothing to compare with).
    """
    saved = meta.get("reader", {}).get("global_batch_size")
    if saved is None:
        saved = meta.get("config", {}).get("data", {}).get("global_batch_size")
    if saved is not None and int(saved) != global_batch_size:
        raise CheckpointError(
            f"checkpoint {source} was written with --global_batch_size {saved}, this run uses {global_batch_size}: "
            f"its step {step} and learning-rate schedule count batches of {saved} rows. Resume with "
            f"--global_batch_size {saved}, or use another --save_checkpoint_path to start a new run")
