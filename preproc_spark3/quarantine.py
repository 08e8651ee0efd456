"""Malformed lines: write them to a quarantine file, summarise them, fail above a fraction.

`<out_dir>/quarantine.jsonl` holds one JSON object per malformed line, in (day, line) order:
{"source_file": ".../day_3", "line_number": 17, "kind": "integer", "reason": "I3: 'abc' is not ...",
 "raw_line": "<the line as read>"}. Nothing malformed is dropped without being counted here.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

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


def write_quarantine(parsed, raw_dir: str, out_dir: Path, total_lines: int) -> MalformedSummary:
    """Write every malformed row of `parsed` (see validate.parse_lines) to the quarantine file."""
    from pyspark.sql import functions as F

    bad = parsed.filter(F.col("reason").isNotNull())
    records = bad.select(F.concat(F.lit(str(Path(raw_dir).resolve()) + "/"), F.col("file")).alias("source_file"),
                         F.col("line").alias("line_number"), "kind", "reason",
                         F.col("value").alias("raw_line"), "day")
    target = out_dir / QUARANTINE_FILE
    staging = out_dir / "_quarantine_parts"
    (records.orderBy("day", "line_number").drop("day")
     .coalesce(1).write.mode("overwrite").json(str(staging)))
    parts = sorted(staging.glob("part-*"))
    with open(target, "wb") as sink:  # concatenated in order (usually one part)
        for part in parts:
            with open(part, "rb") as source:
                shutil.copyfileobj(source, sink)
    shutil.rmtree(staging)

    counts = bad.groupBy("file", "kind").count().collect()
    by_kind: dict[str, int] = {}
    by_file: dict[str, int] = {}
    for row in counts:
        by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + row["count"]
        by_file[row["file"]] = by_file.get(row["file"], 0) + row["count"]
    examples = []
    with open(target, encoding="utf-8") as written:  # already in (day, line) order
        for text, _ in zip(written, range(EXAMPLES_IN_ERROR)):
            record = json.loads(text)
            examples.append(f"{record['source_file']} line {record['line_number']}: {record['reason']}")
    return MalformedSummary(total_lines=total_lines, malformed_lines=sum(by_kind.values()), by_kind=by_kind,
                            by_file=by_file, quarantine_file=str(target), examples=examples)


def check_malformed_fraction(summary: MalformedSummary, max_fraction: float) -> None:
    if summary.fraction > max_fraction:
        shown = "\n  ".join(summary.examples)
        raise MalformedInputError(
            f"{summary.describe()}, above the allowed fraction {max_fraction:g} (--max_malformed_fraction). "
            f"First malformed lines:\n  {shown}")
