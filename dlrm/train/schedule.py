"""The reference DLRM learning-rate schedule, as a pure function of the step.

    step < warmup_steps                     base * step / warmup_steps         (linear warmup)
    warmup_steps <= step < decay_start      base
    decay_start <= step < decay_end         end + (base - end) * (1 - (step - decay_start) / decay_steps) ** power
    step >= decay_end                       end                                 (clamped)

`step` is the number of updates already applied (0-based), as in the reference PyTorch DLRM
(its first update therefore has lr 0 when warming up). NVIDIA's TF2 version keeps evaluating the
polynomial past decay_end, where (1 - progress) ** 2 grows again; ours is clamped. The schedule has
no state: resuming from a checkpoint only needs the restored step.

Wide & Deep (NVIDIA's TF2 code) has two: the wide part's rate is constant (`ConstantSchedule`), the
deep part's (`WideDeepSchedule`) warms up linearly over `deep_warmup_epochs`, then is base/4, then
base/8 after epoch warmup + (epochs - warmup) / 2. Both count in steps, so the loop tells the schedules
the steps per epoch (`set_steps_per_epoch`) before the training step is traced.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Protocol, Sequence

import tensorflow as tf

from dlrm.config import OptimizerConfig


class Schedule(Protocol):
    """What the optimizers and the loop ask of a schedule."""

    def set_steps_per_epoch(self, steps: int) -> None: ...

    def value_at(self, step: int) -> float: ...

    def learning_rates_at(self, step: int) -> Dict[str, float]: ...

    def __call__(self, step) -> tf.Tensor: ...


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

    def set_steps_per_epoch(self, steps: int) -> None:
        """This schedule counts steps only."""

    def learning_rates_at(self, step: int) -> Dict[str, float]:
        """Per-group rates for the logs beyond `value_at` (none: one group)."""
        return {}

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


class ConstantSchedule:
    """The same rate at every step (Wide & Deep's wide part)."""

    def __init__(self, rate: float):
        self.base = float(rate)

    def set_steps_per_epoch(self, steps: int) -> None:
        """Constant: nothing depends on the epoch length."""

    def value_at(self, step: int) -> float:
        return self.base

    def learning_rates_at(self, step: int) -> Dict[str, float]:
        return {}

    def __call__(self, step) -> tf.Tensor:
        return tf.constant(self.base, tf.float32)


class WideDeepSchedule:
    """NVIDIA's deep-part schedule, in steps once the epoch length is known:

        step < W                  base * step / W               W = warmup_epochs * steps_per_epoch
        W <= step <= B            base / 4                      B = (warmup + (epochs - warmup) / 2) * steps_per_epoch
        step > B                  base / 8
    """

    def __init__(self, base: float, warmup_epochs: float, epochs: float):
        if base < 0 or warmup_epochs < 0 or epochs <= 0:
            raise ValueError("the deep learning rate and warmup epochs must be >= 0 and the epochs > 0")
        self.base = float(base)
        self.warmup_epochs = float(warmup_epochs)
        self.epochs = float(epochs)
        self.steps_per_epoch: Optional[int] = None

    def set_steps_per_epoch(self, steps: int) -> None:
        self.steps_per_epoch = int(steps)

    def _bounds(self) -> tuple:
        if self.steps_per_epoch is None:
            raise RuntimeError("WideDeepSchedule: set_steps_per_epoch() must be called before the rate is asked for")
        warmup = self.warmup_epochs * self.steps_per_epoch
        return warmup, (self.warmup_epochs + (self.epochs - self.warmup_epochs) / 2.0) * self.steps_per_epoch

    def value_at(self, step: int) -> float:
        warmup, boundary = self._bounds()
        if step < warmup:
            return self.base * step / warmup
        return self.base / 4.0 if step <= boundary else self.base / 8.0

    def learning_rates_at(self, step: int) -> Dict[str, float]:
        return {}

    def __call__(self, step) -> tf.Tensor:
        warmup, boundary = self._bounds()
        step = tf.cast(step, tf.float64)
        lr = tf.where(step <= boundary, tf.constant(self.base / 4.0, tf.float64), self.base / 8.0)
        if warmup > 0:
            lr = tf.where(step < warmup, self.base * step / warmup, lr)
        return tf.cast(lr, tf.float32)


class GroupSchedule:
    """The schedules of an optimizer group, by group name: `value_at` is the first reported group's rate,
    and `learning_rates_at` gives every reported group's (`lr_<group>`) for the logs. `reported`: the groups
    the model has variables for (default: all)."""

    def __init__(self, schedules: Mapping[str, Schedule], reported: Optional[Sequence[str]] = None):
        self.schedules = dict(schedules)
        self.reported = [name for name in self.schedules if reported is None or name in reported]

    def set_steps_per_epoch(self, steps: int) -> None:
        for schedule in self.schedules.values():
            schedule.set_steps_per_epoch(steps)

    def value_at(self, step: int) -> float:
        return self.schedules[self.reported[0]].value_at(step)

    def learning_rates_at(self, step: int) -> Dict[str, float]:
        return {f"lr_{name}": self.schedules[name].value_at(step) for name in self.reported}

    def __call__(self, step) -> tf.Tensor:
        return self.schedules[self.reported[0]](step)
