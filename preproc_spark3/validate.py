"""Parse raw Criteo TSV lines into typed columns and name the first problem of each malformed line.

A well-formed line has 40 tab-separated fields: label (0 or 1), 13 integers (optional sign, at most
18 digits, so they fit int64), 26 categoricals (1-8 hex digits, case-insensitive). Any integer or
categorical field may be empty (missing). Anything else is malformed: the row keeps a `reason`
(e.g. "I3: 'abc' is not an integer (at most 18 digits)") and a `kind` for the summary, and is
quarantined instead of being used. Plain Spark SQL functions only (no Python UDFs).
"""
from __future__ import annotations

from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, RAW_FIELD_COUNT

INTEGER_PATTERN = r"^-?[0-9]{1,18}$"
HEX_PATTERN = r"^[0-9a-fA-F]{1,8}$"
SHOWN_CHARS = 32  # how much of a bad field a reason quotes

KIND_FIELD_COUNT, KIND_LABEL, KIND_INTEGER, KIND_CATEGORICAL = "field_count", "label", "integer", "categorical"


def parse_lines(numbered):
    """DataFrame[day, file, line, value] -> typed columns + `reason`/`kind` (null when well formed) + raw `value`."""
    from pyspark.sql import functions as F

    fields = F.split(F.col("value"), "\t", -1)
    field_count = F.size(fields)
    frame = numbered.select("day", "file", "line", "value", fields.alias("fields"))
    raw = [F.col("fields").getItem(i) for i in range(RAW_FIELD_COUNT)]

    def quoted(text):
        return F.concat(F.lit("'"), F.substring(text, 1, SHOWN_CHARS), F.lit("'"))

    checks = [(field_count != RAW_FIELD_COUNT, KIND_FIELD_COUNT,
               F.concat(F.lit("wrong field count: "), field_count.cast("string"),
                        F.lit(f" tab-separated fields, expected {RAW_FIELD_COUNT}"))),
              (~raw[0].isin("0", "1"), KIND_LABEL,
               F.concat(F.lit(f"{LABEL}: "), quoted(raw[0]), F.lit(" is not 0 or 1")))]
    for i, name in enumerate(NUMERICAL_COLUMNS, start=1):
        checks.append(((raw[i] != "") & ~raw[i].rlike(INTEGER_PATTERN), KIND_INTEGER,
                       F.concat(F.lit(f"{name}: "), quoted(raw[i]), F.lit(" is not an integer (at most 18 digits)"))))
    for i, name in enumerate(CATEGORICAL_COLUMNS, start=1 + len(NUMERICAL_COLUMNS)):
        checks.append(((raw[i] != "") & ~raw[i].rlike(HEX_PATTERN), KIND_CATEGORICAL,
                       F.concat(F.lit(f"{name}: "), quoted(raw[i]), F.lit(" is not a hex value (1-8 hex digits)"))))

    # First failing check wins (field count, label, I1..I13, C1..C26): one CASE WHEN chain each.
    reason = F.when(checks[0][0], checks[0][2])
    kind = F.when(checks[0][0], F.lit(checks[0][1]))
    for condition, kind_name, message in checks[1:]:
        reason = reason.when(condition, message)
        kind = kind.when(condition, F.lit(kind_name))

    def present(i):
        return F.when(raw[i] != "", raw[i])

    typed = [raw[0].cast("int").alias(LABEL)]
    typed += [present(i).cast("long").alias(name) for i, name in enumerate(NUMERICAL_COLUMNS, start=1)]
    typed += [F.conv(present(i), 16, 10).cast("long").alias(name)
              for i, name in enumerate(CATEGORICAL_COLUMNS, start=1 + len(NUMERICAL_COLUMNS))]
    parsed = frame.select("day", "file", "line", reason.alias("reason"), kind.alias("kind"), "value", *typed)
    # The raw text is only kept for the quarantine.
    return parsed.withColumn("value", F.when(F.col("reason").isNotNull(), F.col("value")))
