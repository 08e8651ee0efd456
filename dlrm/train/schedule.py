"""The reference DLRM learning-rate schedule, as a pure function of the step.

    step < warmup_steps                     base * step / warmup_steps         (linear warmup)
    warmup_steps <= step < decay_start      base
    decay_start <= step < decay_end         end + (base - end) * (1 - (step - decay_start) / decay_steps) ** power
    step >= decay_end                       end                                 (clamped)

`step` is the number of updates already applied (0-based), as in the reference PyTorch DLRM
(its first update therefore has lr 0 when warming up). NVIDIA's TF2 version keeps evaluating the
polynomial past decay_end, where (1 - progress) ** 2 grows again; ours is clamped. The schedule has
no state: resuming from a checkpoint only needs the restored step.
"""
from __future__ import annotations

import tensorflow as tf

from dlrm.config import OptimizerConfig


class ReferenceSchedule:
    """lr(step) for a Python int (`value_at`) or an integer tensor inside `tf.function` (`__call__`)."""

    def __init__(self, cfg: OptimizerConfig):
        if cfg.learning_rate < 0 or cfg.end_learning_rate < 0:
            raise ValueError("learning_rate and end_learning_rate must be >= 0")
        if cfg.warmup_steps < 0 or cfg.decay_start_step < 0:
            raise ValueError("warmup_steps and decay_start_step must be >= 0")
        if cfg.decay_steps > 0 and cfg.decay_start_step < cfg.warmup_steps:
            raise ValueError(
                f"decay_start_step ({cfg.decay_start_step}) must not come before the end of the "
                f"warmup ({cfg.warmup_steps}); set decay_steps=0 to disable the decay"
            )
        self.base = float(cfg.learning_rate)
        self.end = float(cfg.end_learning_rate)
        self.warmup_steps = int(cfg.warmup_steps)
        self.decay_start = int(cfg.decay_start_step)
        self.decay_steps = int(cfg.decay_steps)
        self.power = float(cfg.decay_power)

    def value_at(self, step: int) -> float:
        """Pure Python lr at `step` (for logs and tests)."""
        if step < self.warmup_steps:
            return self.base * step / self.warmup_steps
        if self.decay_steps <= 0 or step < self.decay_start:
            return self.base
        progress = min(1.0, (step - self.decay_start) / self.decay_steps)
        return self.end + (self.base - self.end) * (1.0 - progress) ** self.power

    def __call__(self, step) -> tf.Tensor:
        """float32 lr at `step` (int or integer tensor); computed in float64, no Python branching."""
        step = tf.cast(step, tf.float64)
        lr = tf.constant(self.base, tf.float64)
        if self.decay_steps > 0:
            progress = tf.clip_by_value((step - self.decay_start) / self.decay_steps, 0.0, 1.0)
            decayed = self.end + (self.base - self.end) * tf.pow(1.0 - progress, self.power)
            lr = tf.where(step < self.decay_start, lr, decayed)
        if self.warmup_steps > 0:
            lr = tf.where(step < self.warmup_steps, self.base * step / self.warmup_steps, lr)
        return tf.cast(lr, tf.float32)
