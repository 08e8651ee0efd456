"""When and what a training run checkpoints: the schedule, the final and the on-the-way-out checkpoint,
and the refusal to write NaN/inf weights."""
from __future__ import annotations

import contextlib
from typing import ContextManager, Optional

import tensorflow as tf

from dlrm import dist
from dlrm.errors import UserError
from dlrm.train.build import Parts, optimizer_label
from dlrm.train.checkpoint.files import checkpoint_bytes
from dlrm.train.checkpoint.protocol import prepare_checkpoint_dir, save_checkpoint
from dlrm.train.metrics_log import MetricsLog


class NonFiniteLossError(UserError, RuntimeError):
    """Training produced a NaN/inf loss; the run stopped without writing a checkpoint."""

    on_every_rank = True  # the loss and the finiteness check are agreed over all ranks


def non_finite_error(what: str, step: int, last_checkpoint: Optional[str]) -> NonFiniteLossError:
    """The one message for a diverged run, whichever check saw it first (the loss after a step, or the
    weights before a checkpoint: which comes first depends on the CPU's kernels)."""
    return NonFiniteLossError(f"{what} at step {step}: stopped without writing a checkpoint (lower "
                              f"--learning_rate or lengthen --warmup_steps, then restart); last good checkpoint: "
                              f"{last_checkpoint or 'none'}")


# Rows of a table checked at a time: is_finite over a whole big table would allocate a bool copy of it.
FINITE_CHECK_ROWS = 1 << 20


def all_finite(variables, group: dist.ProcessGroup) -> bool:
    """True on every rank iff every floating-point value of every rank's `variables` is finite."""
    checks = []
    for v in variables:
        if not v.dtype.is_floating:
            continue
        rows = v.shape[0] if v.shape.rank else 0
        starts = range(0, rows, FINITE_CHECK_ROWS) if rows > FINITE_CHECK_ROWS else [None]
        checks += [tf.reduce_all(tf.math.is_finite(v if s is None else v[s:s + FINITE_CHECK_ROWS])) for s in starts]
    return bool(group.all_ranks_true(tf.reduce_all(checks), name="finite").numpy())


def checkpoint_dir_lock(parts: Parts) -> ContextManager:
    """Check --save_checkpoint_path (writable, room for a checkpoint) on every rank and lock it for the run."""
    path = parts.config.train.save_checkpoint_path
    if not path:
        return contextlib.nullcontext()
    dense, stored, _ = parts.checkpoint_variables(with_optimizer=True)
    expected = checkpoint_bytes(dense, stored, parts.group.rank)
    return prepare_checkpoint_dir(path, expected, parts.group)


class Checkpoints:
    """Writes this run's checkpoints and remembers the last good one (what a stopped run points to)."""

    def __init__(self, parts: Parts, steps_per_epoch: int, log: MetricsLog, last: Optional[str] = None,
                 last_step: Optional[int] = None):
        self.parts, self.steps_per_epoch, self.log = parts, steps_per_epoch, log
        self.root = parts.config.train.save_checkpoint_path
        self.last, self.last_step = last, last_step

    def due(self, step: int) -> bool:
        every = self.parts.config.train.checkpoint_every_steps
        return bool(self.root and every and step % every == 0)

    def save(self, step: int) -> str:
        """Write checkpoint `step`, unless a weight went NaN/inf (then the last good one stays current)."""
        if not self._weights_finite():
            self.log.event("stopped", step, reason="non-finite weights")
            raise non_finite_error("weights are NaN/inf", step, self.last)
        self.last, self.last_step = self._write(step), step
        return self.last

    def save_final(self, step: int) -> Optional[str]:
        """The end-of-training checkpoint: kept if this run wrote or restored this very step (e.g. resumed at
        the end), else written, over a `step_X` directory of that step already on disk (one that failed
        verification and was skipped on resume)."""
        if not self.root or (self.last is not None and self.last_step == step):
            return self.last
        return self.save(step)

    def save_before_stopping(self, step: int) -> str:
        """Checkpoint the state after `step` on the way out; returns a note for the user saying what was
        saved. Every rank must call it (the write is collective)."""
        if not self.root:
            return "no checkpoint written (no --save_checkpoint_path)"
        if self.last_step != step:
            if not self._weights_finite():
                return f"weights are NaN/inf, no checkpoint written; last good checkpoint: {self.last or 'none'}"
            self.last, self.last_step = self._write(step), step
        return f"checkpoint {self.last} written; run the same command again to resume from it"

    def _weights_finite(self) -> bool:
        dense, stored, _ = self.parts.checkpoint_variables(with_optimizer=True)
        return all_finite(list(dense.values()) + [v for _, slots in stored for v in slots.values()], self.parts.group)

    def _write(self, step: int) -> str:
        parts, cfg = self.parts, self.parts.config
        dense, stored, _ = parts.checkpoint_variables(with_optimizer=True)
        epoch, batch = divmod(step, self.steps_per_epoch)
        meta = {
            "world_size": parts.group.size,
            "model_shape": dict(parts.model_shape(), optimizer=optimizer_label(cfg)),
            "optimizer": {"name": optimizer_label(cfg), "iterations": step},
            "schedule": {"step": step, "lr": parts.training_optimizer().schedule.value_at(step),
                         **parts.training_optimizer().schedule.learning_rates_at(step)},
            "reader": {"epoch": epoch, "batch": batch, "steps_per_epoch": self.steps_per_epoch,
                       "global_batch_size": cfg.data.global_batch_size},
            "rng": {"seed": cfg.train.seed, "model_seed": cfg.model.seed},
            "plan": parts.plan.to_dict() if parts.plan is not None else None,
            "config": cfg.to_dict(),
        }
        assert self.root, "checkpoints are written only with --save_checkpoint_path"
        path = save_checkpoint(self.root, step, dense, stored, meta, keep=cfg.train.keep_checkpoints,
                                          group=parts.group, table_names=parts.table_names)
        self.log.event("checkpoint", step, path=path)
        return path
