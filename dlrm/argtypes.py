"""Types for command-line flags, shared by every entry point, and a parser that reports once.

Each type turns the text a user typed into a value or refuses it with a message that says what is
expected (argparse prefixes the flag name). One table of types instead of checks spread over the
CLIs: a count is `positive_int` or `count`, a rate is `positive_number`, a seed is `seed`, and so on.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Optional, Sequence

from dlrm.errors import UsageError

SEED_LIMIT = 2**32  # numpy and TensorFlow accept seeds in [0, 2**32)


def _int(text: str, expected: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None


def _number(text: str, expected: str) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r} (not a finite number)")
    return value


def _within(value, ok: bool, expected: str, text: str):
    """`value` if `ok`, else the argparse error naming what was expected and what was typed."""
    if not ok:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (sizes, counts of steps or rows that cannot be empty)."""
    value = _int(text, "a positive integer")
    return _within(value, value >= 1, "a positive integer", text)


def count(text: str) -> int:
    """An integer >= 0 (optional counts: warmup steps, prefetched batches, optimizer slots)."""
    value = _int(text, "an integer >= 0")
    return _within(value, value >= 0, "an integer >= 0", text)


def seed(text: str) -> int:
    """A random seed: an integer in [0, 2**32)."""
    expected = f"a seed, an integer from 0 to {SEED_LIMIT - 1}"
    value = _int(text, expected)
    return _within(value, 0 <= value < SEED_LIMIT, expected, text)


def positive_number(text: str) -> float:
    """A finite number > 0 (learning rate, epochs, decay power, timeouts)."""
    value = _number(text, "a positive number")
    return _within(value, value > 0, "a positive number", text)


def non_negative_number(text: str) -> float:
    """A finite number >= 0 (a final learning rate of 0 is allowed)."""
    value = _number(text, "a number >= 0")
    return _within(value, value >= 0, "a number >= 0", text)


def dropout_rate(text: str) -> float:
    """A dropout rate: a number in [0, 1)."""
    value = _number(text, "a rate in [0, 1)")
    return _within(value, 0 <= value < 1, "a rate in [0, 1)", text)


_DASH_OR_COMMA_LIST = re.compile(r"\s*\d+(\s*[-,]\s*\d+)*\s*")
_COMMA_LIST = re.compile(r"\s*\d+(\s*,\s*\d+)*\s*")


def _int_list(text: str, pattern: re.Pattern, separators: str, example: str) -> tuple[int, ...]:
    if not pattern.fullmatch(str(text)):
        raise argparse.ArgumentTypeError(f"expected positive integers separated by {separators} "
                                         f"(e.g. {example}), got {text!r}")
    values = tuple(int(part) for part in re.split(r"[-,]", text))
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers (e.g. {example}), got {text!r}")
    return values


def layer_sizes(text: str) -> tuple[int, ...]:
    """'512-256-128' or '512,256,128' -> (512, 256, 128): every size positive, no empty entry."""
    return _int_list(text, _DASH_OR_COMMA_LIST, "'-' or ','", "512-256-128")


def sizes_list(text: str) -> list[int]:
    """'1000,20,300' -> [1000, 20, 300]: table sizes, each positive."""
    return list(_int_list(text, _COMMA_LIST, "','", "1000,20,300"))


def feature_pairs(text: str) -> tuple[tuple[str, str], ...]:
    """'A:B,C:D' -> (('A', 'B'), ('C', 'D')): pairs of two different feature names, each pair once (in
    either order). Whether the names exist is the dataset's to say (`dlrm.feature_crosses.cross_problems`)."""
    pairs: list[tuple[str, str]] = []
    for item in str(text).split(","):
        names = tuple(name.strip() for name in item.split(":"))
        if len(names) != 2 or not all(names):
            raise argparse.ArgumentTypeError(f"expected feature pairs A:B separated by ',' (e.g. "
                                             f"ad_id:geo_location_state), got {item.strip()!r} in {text!r}")
        first, second = names
        if first == second:
            raise argparse.ArgumentTypeError(f"{item.strip()!r} crosses feature {first!r} with itself")
        if (first, second) in pairs or (second, first) in pairs:
            raise argparse.ArgumentTypeError(f"the pair {first}:{second} is listed twice in {text!r}")
        pairs.append((first, second))
    return tuple(pairs)


def one_character(text: str) -> str:
    """A single character (a CSV field separator)."""
    if len(text) != 1:
        raise argparse.ArgumentTypeError(f"expected one character, got {text!r}")
    return text


def show_default(value, separator: str = "-") -> str:
    """A default as a user would type it: (512, 256, 128) -> 512-256-128 (or 512 256 128 for a flag that
    takes several values: separator " "), feature pairs -> a:b,c:d, None or empty -> none."""
    if value is None or (isinstance(value, (tuple, list)) and not value):
        return "none"
    if isinstance(value, (tuple, list)) and isinstance(value[0], (tuple, list)):  # feature pairs
        return ",".join(":".join(pair) for pair in value)
    if isinstance(value, (tuple, list)):
        return separator.join(str(v) for v in value)
    return str(value)


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises `UsageError` instead of printing and exiting, so that the shared entry-point
    handler (`dlrm.cli_errors.run_main`) prints a usage error once (from rank 0) like any other. Flags are
    typed whole (no abbreviation): what a flag applies to is checked on its name as typed."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(f"{self.format_usage()}{self.prog}: error: {message}")


def command_line(argv: Optional[Sequence[str]]) -> list[str]:
    """The arguments a parser reads: `argv`, or this process's."""
    return list(argv) if argv is not None else sys.argv[1:]


def typed_flag(argv: Sequence[str], flag: str) -> bool:
    """Whether `flag` is typed in `argv` (as `--flag` or `--flag=value`, before any `--`)."""
    for token in argv:
        if token == "--":
            return False
        if token == flag or token.startswith(flag + "="):
            return True
    return False


def refuse_unless(parser: argparse.ArgumentParser, argv: Sequence[str], applies: bool, flags: Sequence[str],
                  why: str) -> None:
    """Unless they apply, the `flags` typed in `argv` would change nothing: the first is refused, `why` says
    where it applies."""
    if applies:
        return
    for flag in flags:
        if typed_flag(argv, flag):
            parser.error(f"argument {flag}: {why}")


DEBUG_HELP = "print the traceback of errors caused by input or configuration too (to report a problem)"


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """`--debug` (read by `dlrm.cli_errors.run_main`): show the traceback of a user error too."""
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
