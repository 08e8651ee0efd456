"""Memory sizes as people type and read them: '80GiB' <-> bytes (flags of every CLI, planner messages)."""
from __future__ import annotations

import argparse
import math
import re

GiB = 1024**3
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+]?[0-9]+)?)\s*([KMGT]i?B?|B)?\s*", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """'80GiB', '1.5TiB', '500MB', '1e9' -> bytes (binary units for *iB, decimal for *B; any case)."""
    match = _SIZE.fullmatch(str(text))
    if not match:
        raise ValueError(f"invalid size {text!r}: expected a memory size, a number with an optional unit "
                         f"(80GiB, 512MiB, 2TB, 1e9)")
    number, unit = float(match.group(1)), (match.group(2) or "B").upper()
    if not math.isfinite(number):
        raise ValueError(f"invalid size {text!r}: not a finite number")
    if unit == "B":
        scale = 1
    else:
        power = "KMGT".index(unit[0]) + 1
        scale = (1024 if "I" in unit else 1000) ** power
    return int(number * scale)


def byte_size(text: str) -> int:
    """`parse_bytes` as an argparse type: a bad size is a usage error, not a traceback."""
    try:
        return parse_bytes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def positive_byte_size(text: str) -> int:
    """`byte_size` that refuses 0 (a budget or threshold of nothing)."""
    value = byte_size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a memory size above 0, got {text!r}")
    return value


def format_bytes(n: float, round_up: bool = False) -> str:
    """'17.45 GiB'; `round_up`: never below `n` (a minimum a user can type back and be sure to meet)."""
    for unit, scale in (("TiB", 1024**4), ("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            value = math.ceil(n / scale * 100) / 100 if round_up else n / scale
            return f"{value:.2f} {unit}"
    return f"{math.ceil(n) if round_up else int(n)} B"
