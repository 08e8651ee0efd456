"""Independent reference of the preprocessing rules in plain Python + numpy (the tests' oracle).

Deliberately written from the rules in docs/preprocessing.md, line by line, without any code of
preproc_spark3, so the Spark job is checked against a second implementation, not against itself.
Slow (one Python loop per line): only for the small generated test days.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

N_INT, N_CAT = 13, 26
_INTEGER = re.compile(r"-?[0-9]{1,18}")
_HEX = re.compile(r"[0-9a-fA-F]{1,8}")


@dataclass
class Row:
    day: int
    line: int
    label: int
    ints: list  # int or None
    cats: list  # int or None


@dataclass
class Quarantined:
    source_file: str
    line_number: int
    kind: str
    reason: str
    raw_line: str


@dataclass
class Reference:
    cardinalities: list[int]
    splits: dict[str, dict[str, np.ndarray]]  # name -> label, numerical, categorical, day, line
    quarantined: list[Quarantined] = field(default_factory=list)
    total_lines: int = 0


def _problem(fields: list[str]):
    """(kind, reason) of the first problem of a line, or None when it is well formed."""
    if len(fields) != 1 + N_INT + N_CAT:
        return "field_count", f"wrong field count: {len(fields)} tab-separated fields, expected 40"
    if fields[0] not in ("0", "1"):
        return "label", f"label: '{fields[0][:32]}' is not 0 or 1"
    for i in range(N_INT):
        text = fields[1 + i]
        if text and not _INTEGER.fullmatch(text):
            return "integer", f"I{i + 1}: '{text[:32]}' is not an integer (at most 18 digits)"
    for i in range(N_CAT):
        text = fields[1 + N_INT + i]
        if text and not _HEX.fullmatch(text):
            return "categorical", f"C{i + 1}: '{text[:32]}' is not a hex value (1-8 hex digits)"
    return None


def _read_day(path: Path, day: int, quarantined: list[Quarantined]) -> tuple[list[Row], int]:
    rows, n = [], 0
    with open(path, encoding="utf-8", newline=None) as f:
        for n, text in enumerate(f, start=1):
            text = text.rstrip("\n")
            fields = text.split("\t")
            problem = _problem(fields)
            if problem:
                quarantined.append(Quarantined(str(path.resolve()), n, problem[0], problem[1], text))
                continue
            rows.append(Row(day, n, int(fields[0]),
                            [int(t) if t else None for t in fields[1:1 + N_INT]],
                            [int(t, 16) if t else None for t in fields[1 + N_INT:]]))
    return rows, n


def _dictionaries(rows: list[Row], thresholds: list[int]) -> list[dict[int, int]]:
    maps = []
    for f in range(N_CAT):
        counts = Counter(r.cats[f] for r in rows if r.cats[f] is not None)
        kept = sorted(((c, v) for v, c in counts.items() if c >= thresholds[f]), key=lambda cv: (-cv[0], cv[1]))
        maps.append({v: i for i, (_, v) in enumerate(kept, start=1)})
    return maps


def _arrays(rows: list[Row], maps: list[dict[int, int]], log_offset: float) -> dict[str, np.ndarray]:
    def numerical(x):
        x = 0 if x is None or x < 0 else x
        return math.log(float(x) + log_offset)

    return {
        "label": np.array([r.label for r in rows], dtype=np.float32),
        "numerical": np.array([[numerical(x) for x in r.ints] for r in rows], dtype=np.float64)
                       .astype(np.float32).reshape(len(rows), N_INT),
        "categorical": np.array([[maps[f].get(v, 0) if v is not None else 0 for f, v in enumerate(r.cats)]
                                 for r in rows], dtype=np.int32).reshape(len(rows), N_CAT),
        "day": np.array([r.day for r in rows], dtype=np.int64),
        "line": np.array([r.line for r in rows], dtype=np.int64),
    }


def reference_preprocess(raw_dir, train_days, eval_day: int, thresholds: list[int], log_offset: float = 1.0,
                         dictionary_from_all_days: bool = False) -> Reference:
    """Rows in input order (no shuffle): train = train days, test/validation = halves of the eval day."""
    quarantined: list[Quarantined] = []
    by_day, total = {}, 0
    for day in sorted(set(train_days) | {eval_day}):
        by_day[day], n = _read_day(Path(raw_dir) / f"day_{day}", day, quarantined)
        total += n
        if day == eval_day:
            eval_lines = n
    vocab_days = sorted(set(train_days) | ({eval_day} if dictionary_from_all_days else set()))
    maps = _dictionaries([r for d in vocab_days for r in by_day[d]], thresholds)
    first_half = (eval_lines + 1) // 2
    train = [r for d in sorted(train_days) for r in by_day[d]]
    test = [r for r in by_day[eval_day] if r.line <= first_half]
    validation = [r for r in by_day[eval_day] if r.line > first_half]
    splits = {name: _arrays(rows, maps, log_offset)
              for name, rows in (("train", train), ("test", test), ("validation", validation))}
    return Reference([len(m) + 1 for m in maps], splits, quarantined, total)
