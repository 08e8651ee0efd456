"""Generator of small raw Criteo day files in the real click-log format, for tests and benchmarks.

Each line: label, 13 integers, 26 categoricals (8 hex digits), tab-separated, `\\n`-terminated; any
integer or categorical may be empty. Categorical values follow a Zipf-like law over a small
per-feature vocabulary, so frequency thresholds of a few counts cut real values (and count ties
occur). Integers include negatives and large values. Malformed lines of every kind are injected at
known positions, and `RawDays.malformed` records them (file, 1-based line number, kind).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

NUM_NUMERICAL, NUM_CATEGORICAL = 13, 26
MALFORMED_KINDS = ("field_count", "label", "integer", "categorical")
_BAD_INTEGERS = ("abc", "1.5", "12345678901234567890", "0x1f", "--3", " 7")
_BAD_CATEGORICALS = ("zz12ab34", "123456789", "12 4", "g0000000", "-1a2b3c4")


@dataclass
class MalformedLine:
    file: str  # absolute path of the day file
    line: int  # 1-based
    kind: str  # one of MALFORMED_KINDS


@dataclass
class RawDays:
    paths: dict[int, Path]
    lines_per_day: dict[int, int]
    malformed: list[MalformedLine] = field(default_factory=list)


def _vocabularies(rng: np.random.Generator, sizes: Sequence[int]) -> list[np.ndarray]:
    """Per feature, distinct 8-hex-digit values (as strings; a few written in upper case)."""
    vocabs = []
    for size in sizes:
        values = rng.choice(2**32, size=size, replace=False)
        text = np.array([f"{v:08x}" for v in values], dtype=object)
        upper = rng.random(size) < 0.1
        text[upper] = [t.upper() for t in text[upper]]
        vocabs.append(text)
    return vocabs


def _zipf_indices(rng: np.random.Generator, size: int, rows: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, size + 1) ** 1.1
    return rng.choice(size, size=rows, p=weights / weights.sum())


def _good_lines(rng: np.random.Generator, rows: int, vocabs: list[np.ndarray], empty_prob: float,
                negative_prob: float) -> list[str]:
    columns = [np.where(rng.random(rows) < 0.25, "1", "0").astype(object)]
    for _ in range(NUM_NUMERICAL):
        values = np.floor(rng.lognormal(1.5, 2.0, rows)).astype(np.int64)
        negative = rng.random(rows) < negative_prob
        values[negative] = -rng.integers(1, 4, negative.sum())
        text = values.astype(str).astype(object)
        text[rng.random(rows) < empty_prob] = ""
        columns.append(text)
    for vocab in vocabs:
        text = vocab[_zipf_indices(rng, len(vocab), rows)]
        text[rng.random(rows) < empty_prob] = ""
        columns.append(text)
    return ["\t".join(fields) for fields in zip(*columns)]


def _malformed_line(rng: np.random.Generator, good: str, kind: str) -> str:
    fields = good.split("\t")
    if kind == "field_count":
        return "\t".join(fields[:-1] if rng.random() < 0.5 else fields + ["0"])
    if kind == "label":
        fields[0] = str(rng.choice(["2", "", "x", "-1"]))
    elif kind == "integer":
        fields[1 + rng.integers(NUM_NUMERICAL)] = str(rng.choice(_BAD_INTEGERS))
    else:
        fields[1 + NUM_NUMERICAL + rng.integers(NUM_CATEGORICAL)] = str(rng.choice(_BAD_CATEGORICALS))
    return "\t".join(fields)


def write_raw_days(raw_dir, days: Sequence[int], lines_per_day: int | Sequence[int], seed: int = 0,
                   malformed_per_day: int = 0, vocabulary_sizes: Optional[Sequence[int]] = None,
                   empty_prob: float = 0.08, negative_prob: float = 0.05, chunk_rows: int = 200_000) -> RawDays:
    """Write `day_<d>` files; `malformed_per_day` lines of each day (cycling through the kinds) are broken."""
    raw_dir = Path(raw_dir)
    raw_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    sizes = vocabulary_sizes or [int(s) for s in rng.integers(3, 60, NUM_CATEGORICAL)]
    vocabs = _vocabularies(rng, sizes)
    counts = [lines_per_day] * len(days) if isinstance(lines_per_day, int) else list(lines_per_day)
    result = RawDays(paths={}, lines_per_day={})
    for day, n_lines in zip(days, counts):
        path = (raw_dir / f"day_{day}").resolve()
        bad_lines = set(rng.choice(n_lines, size=min(malformed_per_day, n_lines), replace=False).tolist())
        bad_kinds = {line: MALFORMED_KINDS[i % len(MALFORMED_KINDS)] for i, line in enumerate(sorted(bad_lines))}
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            for start in range(0, n_lines, chunk_rows):
                lines = _good_lines(rng, min(chunk_rows, n_lines - start), vocabs, empty_prob, negative_prob)
                for offset in sorted(i for i in bad_kinds if start <= i < start + len(lines)):
                    lines[offset - start] = _malformed_line(rng, lines[offset - start], bad_kinds[offset])
                    result.malformed.append(MalformedLine(str(path), offset + 1, bad_kinds[offset]))
                f.write("\n".join(lines) + "\n")
        result.paths[day] = path
        result.lines_per_day[day] = n_lines
    return result
