"""What the trainer calls after training, handed in by the entry point (`dlrm.export.after_training` is one)."""
from __future__ import annotations

from typing import Optional, Protocol

from dlrm.train.metrics_log import MetricsLog


class AfterTraining(Protocol):
    """A step the entry point chains after training (main.py: the export for serving, `dlrm.export`, which
    sits above the trainer and so is handed in, not imported). It runs inside `run` rather than after it:
    `check` on every rank before step 1, so that a target it would refuse costs no training, and `finish` on
    rank 0 with the final checkpoint while the run's log is open, its errors reported like the run's."""

    def check(self) -> None: ...

    def finish(self, checkpoint_dir: str, dataset_dir: Optional[str], log: MetricsLog) -> None: ...
