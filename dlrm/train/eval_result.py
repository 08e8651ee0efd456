"""What one evaluation measured, and the best a model could do on a synthetic dataset (numpy only, no TensorFlow).

`EvalMetrics` travels from the evaluation to the metrics log, the run's result and main's final line;
`BayesOptimal` holds the generator's metadata values they are compared with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

import numpy as np

from dlrm.exact_metrics import MAP_K, exact_auc, log_loss_from_logits, map_at_k


@dataclass(frozen=True)
class EvalMetrics:
    """Exact metrics over every row of the test mapping (all ranks), the same on every rank."""

    auc: float
    logloss: float
    rows: int  # rows evaluated
    map_at_12: Optional[float] = None  # None without a `map` channel (no group ids)
    groups: Optional[int] = None  # groups (displays) MAP@12 averages over: those with at least one click

    def record(self) -> Dict[str, float]:
        """The fields of the metrics log's eval record (MAP@12 and groups only when measured)."""
        values: Dict[str, float] = {"auc": self.auc, "logloss": self.logloss, "rows": self.rows}
        if self.map_at_12 is not None:
            values.update(map_at_12=self.map_at_12, groups=self.groups or 0)
        return values


def score(labels: np.ndarray, logits: np.ndarray, groups: Optional[np.ndarray]) -> EvalMetrics:
    """AUC, log loss and (with group ids) MAP@12 of all rows at once: a group split over batches or ranks
    counts once. MAP ranks by logits, not probabilities: float32 sigmoids saturate to 1.0 and would tie."""
    metrics = EvalMetrics(exact_auc(labels, logits), log_loss_from_logits(labels, logits), int(labels.size))
    if groups is None:
        return metrics
    clicked_groups = np.unique(groups[np.asarray(labels) == 1]).size
    return EvalMetrics(metrics.auc, metrics.logloss, metrics.rows, map_at_k(groups, labels, logits, MAP_K),
                       int(clicked_groups))


@dataclass(frozen=True)
class BayesOptimal:
    """The best expected metrics of a synthetic dataset (from its generator's metadata), None if unknown."""

    auc: Optional[float] = None
    map_at_12: Optional[float] = None

    @classmethod
    def of(cls, metadata: dict) -> "BayesOptimal":
        return cls(metadata.get("bayes_auc"), metadata.get("bayes_map_at_12"))

    def record(self) -> Dict[str, float]:
        """The known values as metrics-log fields (`bayes_auc`, `bayes_map_at_12`)."""
        values = {"bayes_auc": self.auc, "bayes_map_at_12": self.map_at_12}
        return {name: value for name, value in values.items() if value}


def _versus(value: float, best: Optional[float]) -> str:
    return f" (Bayes-optimal {best:.5f}, ratio {value / best:.4f})" if best else ""


def progress_text(metrics: EvalMetrics, bayes: BayesOptimal) -> str:
    """The metrics of one evaluation on one line, each next to its Bayes-optimal value when known."""
    text = f"AUC {metrics.auc:.5f}{_versus(metrics.auc, bayes.auc)}  logloss {metrics.logloss:.5f}"
    if metrics.map_at_12 is not None:
        text += (f"  MAP@12 {metrics.map_at_12:.5f}{_versus(metrics.map_at_12, bayes.map_at_12)} over "
                 f"{metrics.groups:,} groups")
    return text + f"  ({metrics.rows:,} rows)"


def final_text(metrics: EvalMetrics, bayes: BayesOptimal, step: int) -> str:
    """main's last line: `final AUC ..., log loss ...[, MAP@12 ...] at step N[; Bayes-optimal ...]`."""
    text = f"final AUC {metrics.auc:.5f}, log loss {metrics.logloss:.5f}"
    if metrics.map_at_12 is not None:
        text += f", MAP@12 {metrics.map_at_12:.5f}"
    text += f" at step {step}"
    if bayes.auc:
        text += f"; Bayes-optimal AUC of this synthetic dataset {bayes.auc:.5f} (ratio {metrics.auc / bayes.auc:.4f})"
    if bayes.map_at_12 and metrics.map_at_12 is not None:
        text += (f"; Bayes-optimal MAP@12 {bayes.map_at_12:.5f} "
                 f"(ratio {metrics.map_at_12 / bayes.map_at_12:.4f})")
    return text
