"""Parse raw Criteo TSV lines into typed columns and name the first problem of each malformed line.

A well-formed line has 40 tab-separated fields: label (0 or 1), 13 integers (optional sign, at most
18 digits, so they fit int64), 26 categoricals (1-8 hex digits, case-insensitive). Any integer or
categorical field may be empty (missing). Anything else is malformed: the row keeps a `reason`
(e.g. "I3: 'abc' is not an integer (at most 18 digits)") and a `kind` for the summary, and is
quarantined instead of being used. Plain Spark SQL functions only (no Python UDFs).
"""
from __future__ import annotations

from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, RAW_FIELD_COUNT

_INT = r"-?[0-9]{1,18}"
_HEX = r"[0-9a-fA-F]{1,8}"
INTEGER_PATTERN = f"^{_INT}$"
HEX_PATTERN = f"^{_HEX}$"
# The whole of a well-formed line in one pattern (fields may be empty): the fast path; only lines
# failing it get the field-by-field checks that name their first problem.
LINE_PATTERN = (rf"^[01](\t({_INT})?){{{len(NUMERICAL_COLUMNS)}}}"
                rf"(\t({_HEX})?){{{len(CATEGORICAL_COLUMNS)}}}$")
SHOWN_CHARS = 32  # how much of a bad field a reason quotes

KIND_FIELD_COUNT, KIND_LABEL, KIND_INTEGER, KIND_CATEGORICAL = "field_count", "label", "integer", "categorical"
_PROBLEMS = {KIND_LABEL: "is not 0 or 1", KIND_INTEGER: "is not an integer (at most 18 digits)",
             KIND_CATEGORICAL: "is not a hex value (1-8 hex digits)"}
_WRONG_COUNT = -1  # problem index of a line with the wrong number of fields; else the bad field's index


def parse_lines(numbered):
    """DataFrame[day, file, line, value] -> typed columns + `reason`/`kind` (null when well formed) + raw `value`."""
    from pyspark.sql import functions as F

    fields = F.split(F.col("value"), "\t", -1)
    frame = numbered.select("day", "file", "line", "value", fields.alias("fields"))
    raw = [F.col("fields").getItem(i) for i in range(RAW_FIELD_COUNT)]

    # Index of the first bad field (label, I1..I13, C1..C26), _WRONG_COUNT, or null for a good line.
    problem = (F.when(F.col("value").rlike(LINE_PATTERN), F.lit(None).cast("int"))
               .when(F.size("fields") != RAW_FIELD_COUNT, F.lit(_WRONG_COUNT))
               .when(~raw[0].isin("0", "1"), F.lit(0)))
    for i in range(1, RAW_FIELD_COUNT):
        pattern = INTEGER_PATTERN if i <= len(NUMERICAL_COLUMNS) else HEX_PATTERN
        problem = problem.when((raw[i] != "") & ~raw[i].rlike(pattern), F.lit(i))
    frame = frame.withColumn("problem", problem)

    index = F.col("problem")
    kind = (F.when(index == _WRONG_COUNT, F.lit(KIND_FIELD_COUNT)).when(index == 0, F.lit(KIND_LABEL))
            .when(index <= len(NUMERICAL_COLUMNS), F.lit(KIND_INTEGER)).when(index > 0, F.lit(KIND_CATEGORICAL)))
    names = F.array(*[F.lit(n) for n in (LABEL, *NUMERICAL_COLUMNS, *CATEGORICAL_COLUMNS)])
    message = F.when(kind == KIND_LABEL, F.lit(_PROBLEMS[KIND_LABEL])).when(
        kind == KIND_INTEGER, F.lit(_PROBLEMS[KIND_INTEGER])).otherwise(F.lit(_PROBLEMS[KIND_CATEGORICAL]))
    reason = (F.when(index == _WRONG_COUNT,
                     F.concat(F.lit("wrong field count: "), F.size("fields").cast("string"),
                              F.lit(f" tab-separated fields, expected {RAW_FIELD_COUNT}")))
              .when(index >= 0,
                    F.concat(F.element_at(names, index + 1), F.lit(": '"),
                             F.substring(F.element_at(F.col("fields"), index + 1), 1, SHOWN_CHARS),
                             F.lit("' "), message)))

    def present(i):
        return F.when(raw[i] != "", raw[i])

    typed = [raw[0].cast("int").alias(LABEL)]
    typed += [present(i).cast("long").alias(name) for i, name in enumerate(NUMERICAL_COLUMNS, start=1)]
    typed += [F.conv(present(i), 16, 10).cast("long").alias(name)
              for i, name in enumerate(CATEGORICAL_COLUMNS, start=1 + len(NUMERICAL_COLUMNS))]
    # The raw text is only kept for the quarantine.
    return frame.select("day", "file", "line", reason.alias("reason"), kind.alias("kind"),
                        F.when(index.isNotNull(), F.col("value")).alias("value"), *typed)
