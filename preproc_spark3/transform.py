"""Apply the dictionaries and the numerical transform, assign splits, order keys and output chunks.

Output columns: chunk (see preproc_spark3.chunks), shuffle_key, day, line (the order and provenance
columns), label float32, I1..I13 float32, C1..C26 int32. Rows are not sorted here: the writer
(preproc_spark3.to_binary) sorts each chunk by (shuffle_key, day, line) on its own.

- Numericals: missing or negative -> 0, then log(x + log_offset), as float32.
- Splits: training days -> train; the evaluation day is cut by line count: lines 1..ceil(N/2) ->
  test, the rest -> validation (N = all lines of that day, malformed ones included).
- Order: train is shuffled by shuffle_key = xxhash64(seed, day, line), ties broken by (day, line): a
  permutation fixed by the seed alone, whatever the partitioning. With --no_shuffle and for test /
  validation the key is 0, so rows keep their input order (day, line).
- Ids: every dictionary up to --broadcast_max_rows values travels in one broadcast table keyed by
  feature << 32 | value, and all those features are looked up in one pass; larger dictionaries are
  joined by a shuffle join each.
"""
from __future__ import annotations

from preproc_spark3.chunks import ChunkLayout, chunk_column, first_half_lines
from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, TEST, TRAIN, VALIDATION, PreprocConfig

ORDER_COLUMNS = ("shuffle_key", "day", "line")
__all__ = ["ORDER_COLUMNS", "first_half_lines", "transform"]


def transform(rows, dictionary, cardinalities: list[int], config: PreprocConfig, layout: ChunkLayout):
    """rows: well-formed parsed rows of all days; dictionary: DataFrame[feature, value, count, id]."""
    from pyspark.sql import functions as F

    columns = ["day", "line", LABEL, *NUMERICAL_COLUMNS, *CATEGORICAL_COLUMNS]
    frame = rows.select(*columns)
    small = [i for i in range(len(CATEGORICAL_COLUMNS)) if cardinalities[i] - 1 <= config.broadcast_max_rows]
    # All small dictionaries in one broadcast table keyed by feature << 32 | value: built and shipped
    # once, reused by every join (Spark reuses the identical broadcast exchange).
    small_ids = F.broadcast(dictionary.filter(F.col("feature").isin(small))
                            .select(_packed_key(F.col("feature"), F.col("value")).alias("key"), "id"))
    for index, name in enumerate(CATEGORICAL_COLUMNS):
        if index in small:
            frame = frame.join(small_ids, _packed_key(F.lit(index), F.col(name)) == small_ids["key"], "left")
        else:  # too large to broadcast: a shuffle join on this feature's own dictionary
            ids = dictionary.filter(F.col("feature") == index).select(F.col("value").alias("key"), "id")
            frame = frame.join(ids, F.col(name) == ids["key"], "left")
        frame = frame.select(*[F.coalesce(F.col("id"), F.lit(0)).cast("int").alias(c) if c == name else F.col(c)
                               for c in columns])

    split = (F.when(F.col("day") != config.eval_day, F.lit(TRAIN))
             .when(F.col("line") <= layout.test_lines, F.lit(TEST))
             .otherwise(F.lit(VALIDATION)))
    if config.shuffle:
        shuffle_key = F.when(split == TRAIN, F.xxhash64(F.lit(config.seed), "day", "line")).otherwise(F.lit(0))
    else:
        shuffle_key = F.lit(0).cast("long")
    numericals = [F.log(F.greatest(F.coalesce(F.col(c), F.lit(0)), F.lit(0)).cast("double") + float(config.log_offset))
                  .cast("float").alias(c) for c in NUMERICAL_COLUMNS]
    keyed = frame.select(split.alias("split"), shuffle_key.alias("shuffle_key"), "day", "line",
                         F.col(LABEL).cast("float").alias(LABEL), *numericals, *CATEGORICAL_COLUMNS)
    return keyed.select(chunk_column(layout, config, F.col("split"), F.col("shuffle_key")).alias("chunk"),
                        *ORDER_COLUMNS, LABEL, *NUMERICAL_COLUMNS, *CATEGORICAL_COLUMNS)


def _packed_key(feature, value):
    """One long per (feature, value): categorical values are 32-bit, so feature << 32 | value is unique."""
    from pyspark.sql import functions as F

    return F.shiftleft(feature.cast("long"), 32) + value
