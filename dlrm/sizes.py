"""Memory sizes as people type and read them, one grammar for every command line (pure Python).

A size is a number (``4096``, ``1.5``, ``1e9``) with an optional unit, spaces allowed between them,
any case. Every unit is a power of 1024:

- ``KiB``, ``MiB``, ``GiB``, ``TiB`` (binary, as the trainer prints sizes);
- ``k``, ``m``, ``g``, ``t`` and ``kb``, ``mb``, ``gb``, ``tb``, as Spark and the JVM read them
  (``spark.driver.memory 8g``), so one text means one number of bytes wherever it is typed;
- none or ``B``: bytes.

So ``1g`` = ``1GB`` = ``1GiB`` = 2**30 bytes. ``GB`` is read like Spark rather than as 10**9, because
letters are matched in any case (``gb`` must equal ``GB``) and because memory is sold in binary units
(an "80GB" accelerator holds 80 GiB): reading it as 10**9 would budget 7% less than the memory there is.
"""
from __future__ import annotations

import argparse
import math
import re

GiB = 1024**3
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e\+?[0-9]+)?)\s*(?:([kmgt])(?:i?b)?|b)?\s*", re.IGNORECASE)
_EXPECTED = "expected bytes or a number with a unit k/m/g/t, KiB/MiB/GiB/TiB or KB/MB/GB/TB, all powers of 1024"

# The grammar in one line, for the help of every size flag.
SIZE_UNITS = "units k/m/g/t, KiB/MiB/GiB/TiB or KB/MB/GB/TB are all powers of 1024 (1g = 1GiB)"


class SizeError(ValueError):
    """A text that is not a size; the message says what was typed and what is expected."""


def parse_bytes(text: str) -> int:
    """'80GiB', '80g', '1.5 TiB', '128m', '4096', '1e9' -> bytes (rounded down), by the grammar above."""
    match = _SIZE.fullmatch(str(text))
    if not match:
        raise SizeError(f"invalid size {text!r}: {_EXPECTED} (e.g. 80GiB, 512m, 4096)")
    number = float(match.group(1))
    if not math.isfinite(number):
        raise SizeError(f"invalid size {text!r}: not a finite number")
    return int(number * 1024 ** _POWERS[(match.group(2) or "").lower()])


def byte_size(text: str) -> int:
    """`parse_bytes` as an argparse type: a bad size is a usage error naming the flag, not a traceback."""
    try:
        return parse_bytes(text)
    except SizeError as error:
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
