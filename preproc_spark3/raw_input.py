"""Find the raw day files, read them as text lines and number the lines by (day, line) in file order.

Line numbers are what the quarantine reports, what `--no_shuffle` orders by, and how the evaluation
day is cut in half. Spark does not number lines itself, so they are derived after the parse (no
extra pass over the text): every input split ("block") is identified by `_metadata.file_name` +
`_metadata.file_block_start`, rows inside a block are consecutive in `monotonically_increasing_id()`,
and the parse tasks report each block's first row id and line count, hence its first line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preproc_spark3.config import PreprocessError

_DAY_FILE = re.compile(r"day_(\d+)(\.(gz|bz2|snappy|lz4|deflate))?")


def find_day_files(raw_dir: str, days: tuple[int, ...]) -> dict[int, Path]:
    """`day_<N>` (optionally compressed, e.g. `day_<N>.gz`) for each requested day N."""
    root = Path(raw_dir)
    if not root.is_dir():
        raise PreprocessError(f"raw data directory not found: {raw_dir}")
    found: dict[int, list[Path]] = {}
    for path in root.iterdir():
        match = _DAY_FILE.fullmatch(path.name)
        if match and path.is_file():
            found.setdefault(int(match.group(1)), []).append(path)
    files = {}
    for day in days:
        candidates = found.get(day, [])
        if not candidates:
            raise PreprocessError(f"raw file for day {day} not found: expected {root / f'day_{day}'} (or day_{day}.gz)")
        if len(candidates) > 1:
            raise PreprocessError(f"day {day} has several raw files: {sorted(str(p) for p in candidates)}")
        if candidates[0].stat().st_size == 0:
            raise PreprocessError(f"raw file {candidates[0]} is empty")
        files[day] = candidates[0]
    return files


def read_lines(spark, day_files: dict[int, Path]):
    """DataFrame[value, day, file, block_start, row_id]: every raw line with where it came from.

    Rows of one input block ("split", identified by file + block_start) are consecutive in row_id
    (`monotonically_increasing_id`), in file order: `number_lines` turns that into line numbers.
    """
    from pyspark.sql import functions as F

    day_of_name = F.create_map(*[F.lit(x) for day, path in sorted(day_files.items()) for x in (path.name, day)])
    return (spark.read.text([str(p) for p in day_files.values()])
            .select("value", F.element_at(day_of_name, F.col("_metadata.file_name")).alias("day"),
                    F.col("_metadata.file_name").alias("file"),
                    F.col("_metadata.file_block_start").alias("block_start"),
                    F.monotonically_increasing_id().alias("row_id")))


@dataclass
class NumberedLines:
    frame: Any  # the input frame plus `line` (1-based, per file), without block_start / row_id
    lines_per_day: dict[int, int]


def number_lines(spark, rows, blocks, day_files: dict[int, Path]) -> NumberedLines:
    """Line numbers for `rows` (one row per raw line, with file, block_start, row_id), from each input
    block's first row_id and line count (`blocks`), hence each block's first line number."""
    from pyspark.sql import functions as F

    day_of_name = {path.name: day for day, path in day_files.items()}
    block_rows = []
    lines_per_day = {day: 0 for day in day_files}
    for file_name in sorted({b["file"] for b in blocks}):
        next_line = 1
        for block in sorted((b for b in blocks if b["file"] == file_name), key=lambda b: b["block_start"]):
            block_rows.append((file_name, block["block_start"], block["first_row_id"], next_line))
            next_line += block["lines"]
        lines_per_day[day_of_name[file_name]] = next_line - 1
    for day, count in lines_per_day.items():
        if count == 0:
            raise PreprocessError(f"raw file {day_files[day]} has no lines")

    offsets = spark.createDataFrame(
        block_rows, "file string, block_start long, first_row_id long, first_line long")
    line = (F.col("first_line") + F.col("row_id") - F.col("first_row_id")).alias("line")
    numbered = (rows.join(F.broadcast(offsets), ["file", "block_start"])
                .select(*[c for c in rows.columns if c not in ("block_start", "row_id")], line))
    return NumberedLines(numbered, lines_per_day)
