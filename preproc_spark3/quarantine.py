"""Malformed lines: write them to a quarantine file, summarise them, fail above a fraction.

`<out_dir>/quarantine.jsonl` holds one JSON object per malformed line, in (day, line) order:
{"source_file": ".../day_3", "line_number": 17, "kind": "integer", "reason": "I3: 'abc' is not ...",
 "raw_line": "<the line as read>"}. Nothing malformed is dropped without being counted here.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from dlrm.atomic import replaced_atomically
from preproc_spark3.config import MalformedInputError

QUARANTINE_FILE = "quarantine.jsonl"
EXAMPLES_IN_ERROR = 5


@dataclass
class MalformedSummary:
    total_lines: int
    malformed_lines: int
    by_kind: dict[str, int] = field(default_factory=dict)
    by_file: dict[str, int] = field(default_factory=dict)
    quarantine_file: str = ""
    examples: list[str] = field(default_factory=list)

    @property
    def fraction(self) -> float:
        return self.malformed_lines / self.total_lines if self.total_lines else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "fraction": self.fraction}

    def describe(self) -> str:
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(self.by_kind.items())) or "none"
        return (f"{self.malformed_lines} of {self.total_lines} lines malformed ({self.fraction:.4%}; {kinds}); "
                f"quarantined in {self.quarantine_file}")


def write_quarantine(records: list[dict], raw_dir: str, out_dir: str, total_lines: int) -> MalformedSummary:
    """Write the parse tasks' malformed-line records (see parse_job) to the quarantine file, in (day, line)
    order, and summarise them."""
    rows = sorted(((r["day"], int(line), r["file"], kind, reason, raw) for r in records
                   for line, kind, reason, raw in zip(r["line"], r["kind"], r["reason"], r["raw_line"])),
                  key=lambda row: (row[0], row[1]))
    return write_lines((row[2:3] + row[1:2] + row[3:] for row in rows), raw_dir, out_dir, total_lines)


def write_lines(lines: Iterable[tuple], raw_dir: str, out_dir: str, total_lines: int) -> MalformedSummary:
    """Stream quarantined lines, (file name in raw_dir, line number, kind, reason, raw line) in the order
    given, to the quarantine file, and summarise them."""
    source = str(Path(raw_dir).resolve()) + "/"
    target = Path(out_dir) / QUARANTINE_FILE
    by_kind: dict[str, int] = {}
    by_file: dict[str, int] = {}
    examples: list[str] = []
    count = 0
    with replaced_atomically(target, binary=False) as sink:
        for file, line, kind, reason, raw in lines:
            sink.write(json.dumps({"source_file": source + file, "line_number": line, "kind": kind,
                                   "reason": reason, "raw_line": raw}, ensure_ascii=False) + "\n")
            by_kind[kind] = by_kind.get(kind, 0) + 1
            by_file[file] = by_file.get(file, 0) + 1
            if len(examples) < EXAMPLES_IN_ERROR:
                examples.append(f"{source + file} line {line}: {reason}")
            count += 1
    return MalformedSummary(total_lines=total_lines, malformed_lines=count, by_kind=by_kind, by_file=by_file,
                            quarantine_file=str(target), examples=examples)


def check_malformed_fraction(summary: MalformedSummary, max_fraction: float) -> None:
    if summary.fraction > max_fraction:
        shown = "\n  ".join(summary.examples)
        raise MalformedInputError(
            f"{summary.describe()}, above the allowed fraction {max_fraction:g} (--max_malformed_fraction). "
            f"First malformed lines:\n  {shown}")
