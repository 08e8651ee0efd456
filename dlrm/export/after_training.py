"""`main.py --saved_model_output_path`: the export chained after a training run (the trainer's `AfterTraining`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dlrm.config import ExportConfig
from dlrm.export.saved_model import export, saved_model_dir
from dlrm.train.metrics_log import MetricsLog

FLAG = "--saved_model_output_path"


@dataclass(frozen=True)
class ExportAfterTraining:
    """Export the run's final checkpoint as a SavedModel to `out`."""

    out: str

    def check(self) -> None:
        """Refuse an existing or unwritable `out` (every rank, before step 1)."""
        saved_model_dir(self.out, FLAG).check(overwrite=False)

    def finish(self, checkpoint_dir: str, dataset_dir: Optional[str], log: MetricsLog) -> None:
        """Rank 0 exports the final checkpoint (every table assembled in one process); the other ranks have
        finished."""
        result = export(ExportConfig(checkpoint=checkpoint_dir, out=self.out, dataset_dir=dataset_dir),
                        log=log.message, flag=FLAG)
        log.event("saved_model", result.step, path=result.out, seconds=result.seconds)
