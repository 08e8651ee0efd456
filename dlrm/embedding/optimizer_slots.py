"""The one list of optimizers: name -> the per-weight state slots each keeps (pure Python).

The trainer's optimizer classes take their slot names from here, main.py's `--optimizer` choices
are its keys, and the planner counts the slots as extra copies of every embedding weight.
"""
from __future__ import annotations

from typing import Dict, Tuple

from dlrm.choices import named_choice

SLOT_NAMES: Dict[str, Tuple[str, ...]] = {
    "sgd": (),
    "adagrad": ("accumulator",),
    "adam": ("m", "v"),
    "rmsprop": ("rms",),
    "ftrl": ("accumulator", "linear"),
}
OPTIMIZER_NAMES: Tuple[str, ...] = tuple(SLOT_NAMES)


def slot_names(optimizer: str) -> Tuple[str, ...]:
    """Names of the state slots `optimizer` keeps beside every weight."""
    return named_choice(SLOT_NAMES, optimizer, "optimizer")


def slots_for_optimizer(optimizer: str) -> int:
    """Optimizer state copies per embedding weight (memory multiplier minus one)."""
    return len(slot_names(optimizer))
