"""Every synthetic dataset preset by name (pure Python, no numpy: the trainer's flags list them).

The Criteo-shaped presets (`dlrm.data.synthetic.criteo`) are sized by train and test rows; the Wide & Deep
(Outbrain-shaped) ones (`dlrm.data.synthetic.widedeep_generator`) by the rows of the whole click log, which
the reference's day split divides into train and test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dlrm.data.synthetic.criteo import PRESET_NAMES


@dataclass(frozen=True)
class WideDeepPreset:
    """A cap on every reference table (None: the reference's sizes) and the default rows of the log."""

    max_rows: Optional[int]
    rows: int  # train + test


WIDEDEEP_PRESETS = {
    "widedeep": WideDeepPreset(None, 1_500_000),
    # tables <= 5k rows, ~1.6M train rows: a CPU trains W&D near its optimum in a few minutes, and the
    # per-pair effects are seen often enough for the wide part's crosses to learn them
    "widedeep_tiny": WideDeepPreset(5_000, 2_400_000),
}
WIDEDEEP_PRESET_NAMES = tuple(WIDEDEEP_PRESETS)
SYNTHETIC_PRESET_NAMES = PRESET_NAMES + WIDEDEEP_PRESET_NAMES


def is_widedeep_preset(name: Optional[str]) -> bool:
    return name in WIDEDEEP_PRESETS
