"""Reading Kaggle's seven CSVs into typed DataFrames that keep each row's line number.

A file is `NAME.csv` or `NAME.csv.gz`, a header line, comma-separated, `\\N` or an empty field is null.
Every file is found and its header checked before Spark starts, so a missing or wrong file is named
before any work. A line that cannot be read (wrong field count, an id that is not an integer, `clicked`
not 0 or 1, a confidence that is not a finite number, a publish time not `YYYY-MM-DD HH:MM:SS`) is kept with its `kind`
and `reason` for the quarantine; the rules about keys and joins are `bad_rows`'.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass

from dlrm.data.outbrain import LABEL, MS_PER_DAY, NULL, RAW_FILES
from preproc_spark3.config import PreprocessError

STRING_COLUMNS = frozenset({"uuid", "entity_id", "geo_location"})
NUMBER_COLUMNS = frozenset({"confidence_level"})
TIME_COLUMNS = frozenset({"publish_time"})  # read as ms since the Unix epoch (UTC)
INTEGER = r"^-?[0-9]{1,18}$"  # a long that cannot overflow
PUBLISH_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} ([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]$"
# Columns every parsed table has besides its own: where the row comes from and why it is unreadable.
LINE, TEXT, KIND, REASON = "line", "raw_line", "kind", "reason"


@dataclass(frozen=True)
class RawFile:
    stem: str  # a RAW_FILES key
    path: str
    order: int  # position in RAW_FILES: the quarantine lists files in this order

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def find_raw_files(raw_dir: str) -> dict[str, RawFile]:
    """Every RAW_FILES file in `raw_dir`, its header checked; one error naming every missing file."""
    if not os.path.isdir(raw_dir):
        raise PreprocessError(f"raw_dir {raw_dir} is not a directory")
    found, missing = {}, []
    for order, (stem, columns) in enumerate(RAW_FILES.items()):
        paths = [os.path.join(raw_dir, name) for name in (f"{stem}.csv", f"{stem}.csv.gz")]
        present = [path for path in paths if os.path.isfile(path)]
        if not present:
            missing.append(f"{stem}.csv")
            continue
        if len(present) > 1:
            raise PreprocessError(f"both {stem}.csv and {stem}.csv.gz are in {raw_dir}: keep one")
        _check_header(present[0], columns)
        found[stem] = RawFile(stem, os.path.abspath(present[0]), order)
    if missing:
        raise PreprocessError(f"missing input file(s) in {raw_dir}: {', '.join(missing)} (or .csv.gz)")
    return found


def _check_header(path: str, columns: tuple[str, ...]) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", newline="") as lines:
            header = lines.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise PreprocessError(f"cannot read {path}: {error}") from None
    if header != ",".join(columns):
        raise PreprocessError(f"{path} line 1: header {header!r} is not {','.join(columns)!r}")


def read_table(spark, raw: RawFile, max_partition_bytes: int):
    """The data lines of `raw` as a DataFrame: `line` (1-based, the header is line 1), `raw_line`, `kind` and
    `reason` (null when the line is readable) and the file's columns typed (ids long, strings, confidence
    double, publish_time long ms)."""
    from pyspark.sql import functions as F

    columns = RAW_FILES[raw.stem]
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(max_partition_bytes))  # the read splits' size
    lines = numbered_lines(spark, raw.path).where(F.col(LINE) > 1)
    # Each line is split once and each field's text made once: the checks and the types below read the
    # columns (Spark keeps a projection apart when inlining it would repeat its work).
    fields = F.split(F.col(TEXT), ",", -1)
    split = lines.select(LINE, TEXT, F.size(fields).alias("_fields"), *(
        F.when(fields[i].isin(NULL, ""), None).otherwise(fields[i]).alias(f"_text_{name}")
        for i, name in enumerate(columns)))
    text = {name: F.col(f"_text_{name}") for name in columns}
    count = F.col("_fields")
    problems = [(count != len(columns), "field_count",
                 F.concat(count.cast("string"), F.lit(f" fields, expected {len(columns)}")))]
    for name in columns:
        value = text[name]
        if name == LABEL:
            problems.append((value.isNull() | ~value.isin("0", "1"), "label",
                             _not(name, F.coalesce(value, F.lit(NULL)), "0 or 1")))
        elif name in NUMBER_COLUMNS:
            number = value.cast("double")
            bad = value.isNotNull() & (number.isNull() | F.isnan(number) | (F.abs(number) == float("inf")))
            problems.append((bad, "number", _not(name, value, "a finite number")))
        elif name in TIME_COLUMNS:
            bad = value.isNotNull() & (~value.rlike(PUBLISH_TIME) | F.to_date(F.substring(value, 1, 10)).isNull())
            problems.append((bad, "timestamp", _not(name, value, "YYYY-MM-DD HH:MM:SS")))
        elif name not in STRING_COLUMNS:
            problems.append((value.isNotNull() & ~value.rlike(INTEGER), "integer", _not(name, value, "an integer")))
    kind, reason = F.lit(None).cast("string"), F.lit(None).cast("string")
    for condition, problem, why in reversed(problems):  # the first problem of a line names it
        kind = F.when(condition, F.lit(problem)).otherwise(kind)
        reason = F.when(condition, why).otherwise(reason)
    return split.select(F.col(LINE), F.col(TEXT), kind.alias(KIND), reason.alias(REASON),
                        *(_typed(name, text[name]).alias(name) for name in columns))


def numbered_lines(spark, path: str):
    """The lines of a text file (`raw_line`) with their 1-based line numbers (`line`), computed in the JVM.

    A partition of a text scan holds the lines that start in its byte range, in file order, and
    monotonically_increasing_id() is (partition << 33) + the row's index in it: a line's number is the lines
    of the partitions whose ranges start earlier plus its index plus 1. The partitions' line counts and
    starts (one row per partition) are the only data that reach the driver.
    """
    from pyspark.sql import functions as F

    scanned = spark.read.text(path).select(
        F.col("value").alias(TEXT), F.spark_partition_id().alias("partition"),
        F.input_file_block_start().alias("start"), F.monotonically_increasing_id().alias("row_id"))
    counts = scanned.groupBy("partition").agg(F.min("start").alias("start"), F.count(F.lit(1)).alias("lines"))
    offsets = offsets_in_order(counts, "partition", "start", "lines", "lines_before")
    index = F.col("row_id") - F.shiftleft(F.col("partition").cast("long"), 33)
    return scanned.join(F.broadcast(offsets), "partition").select(
        F.col(TEXT), (F.col("lines_before") + index + 1).alias(LINE))


def offsets_in_order(counts, key: str, order: str, rows: str, name: str):
    """key -> `name`, the sum of `rows` over the `counts` rows before its own in `order`: where a group's
    consecutive numbers start. `counts` has one row per group and is collected, so keep the groups few."""
    before, seen = [], 0
    for row in sorted(counts.collect(), key=lambda row: row[order]):
        before.append((row[key], seen))
        seen += row[rows]
    return counts.sparkSession.createDataFrame(before, f"{key} {dict(counts.dtypes)[key]}, {name} long")


def _not(name: str, value, expected: str):
    from pyspark.sql import functions as F

    return F.concat(F.lit(f"{name}: '"), value, F.lit(f"' is not {expected}"))


def _typed(name: str, value):
    """A column's text as its type; publish_time as ms since the epoch, computed without time zones."""
    from pyspark.sql import functions as F

    if name in STRING_COLUMNS:
        return value
    if name in NUMBER_COLUMNS:
        return value.cast("double")
    if name in TIME_COLUMNS:
        days = F.datediff(F.to_date(F.substring(value, 1, 10)), F.to_date(F.lit("1970-01-01")))
        seconds = (F.substring(value, 12, 2).cast("long") * 3600 + F.substring(value, 15, 2).cast("long") * 60
                   + F.substring(value, 18, 2).cast("long"))
        return days.cast("long") * MS_PER_DAY + seconds * 1000
    return value.cast("long")
