"""What a run reports back."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional


@dataclass
class RunResult:
    """What a run reports back (to main.py and the tests); identical on every rank."""

    mode: str
    step: int = 0
    auc: Optional[float] = None
    logloss: Optional[float] = None
    bayes_auc: Optional[float] = None
    checkpoint: Optional[str] = None
    samples_per_sec: Optional[float] = None
    seconds: float = 0.0
    extra: Dict[str, float] = field(default_factory=dict)
