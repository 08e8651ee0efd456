"""What a run reports back."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from dlrm.train.eval_result import BayesOptimal, EvalMetrics


@dataclass
class RunResult:
    """What a run reports back (to main.py and the tests); identical on every rank."""

    mode: str
    step: int = 0
    metrics: Optional[EvalMetrics] = None  # the last evaluation's (train, eval modes)
    bayes: BayesOptimal = field(default_factory=BayesOptimal)  # known only for the synthetic dataset
    checkpoint: Optional[str] = None
    samples_per_sec: Optional[float] = None
    seconds: float = 0.0
    extra: Dict[str, float] = field(default_factory=dict)

    @property
    def auc(self) -> Optional[float]:
        return None if self.metrics is None else self.metrics.auc

    @property
    def logloss(self) -> Optional[float]:
        return None if self.metrics is None else self.metrics.logloss

    @property
    def map_at_12(self) -> Optional[float]:
        return None if self.metrics is None else self.metrics.map_at_12

    @property
    def bayes_auc(self) -> Optional[float]:
        return self.bayes.auc
