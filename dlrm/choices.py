"""A value picked by name from a fixed set of choices (optimizers, placement strategies, presets), with one error for
a name that is not among them. Leaf module (standard library only)."""
from __future__ import annotations

from typing import Mapping, TypeVar

T = TypeVar("T")


def named_choice(choices: Mapping[str, T], name: str, what: str) -> T:
    """`choices[name]`; otherwise ValueError "unknown <what> '<name>'; choose one of (<the names>)"."""
    try:
        return choices[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; choose one of {tuple(choices)}") from None
