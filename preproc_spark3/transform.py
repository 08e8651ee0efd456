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
- Ids: features whose dictionary has up to --broadcast_max_rows values leave here as raw values
  (value - 2^31, int32, null when missing); the writer tasks look their ids up after the shuffle
  (preproc_spark3.dictionary.IdLookup, shipped once per executor). Larger dictionaries are joined
  here, by a shuffle join each.
"""
from __future__ import annotations

from preproc_spark3.chunks import ChunkLayout, chunk_column, first_half_lines
from preproc_spark3.config import CATEGORICAL_COLUMNS, LABEL, NUMERICAL_COLUMNS, TEST, TRAIN, VALIDATION, PreprocConfig
from preproc_spark3.dictionary import VALUE_OFFSET

ORDER_COLUMNS = ("shuffle_key", "day", "line")
__all__ = ["ORDER_COLUMNS", "first_half_lines", "looked_up_features", "transform"]


def transform(rows, dictionary, cardinalities: list[int], config: PreprocConfig, layout: ChunkLayout):
    """rows: well-formed parsed rows of all days; dictionary: DataFrame[feature, value, count, id]."""
    from pyspark.sql import functions as F

    columns = ["day", "line", LABEL, *NUMERICAL_COLUMNS, *CATEGORICAL_COLUMNS]
    frame = rows.select(*columns)
    small = looked_up_features(cardinalities, config)
    for index, name in enumerate(CATEGORICAL_COLUMNS):
        if index in small:  # ids applied by the writer tasks
            value = (F.col(name) - VALUE_OFFSET).cast("int")
        else:  # too large to ship to every task: a shuffle join on this feature's own dictionary
            ids = dictionary.filter(F.col("feature") == index).select(F.col("value").alias("key"), "id")
            frame = frame.join(ids, F.col(name) == ids["key"], "left")
            value = F.coalesce(F.col("id"), F.lit(0)).cast("int")
        frame = frame.select(*[value.alias(c) if c == name else F.col(c) for c in columns])

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


def looked_up_features(cardinalities: list[int], config: PreprocConfig) -> list[int]:
    """Features whose ids the writer tasks look up (dictionaries up to --broadcast_max_rows values)."""
    return [i for i in range(len(CATEGORICAL_COLUMNS)) if cardinalities[i] - 1 <= config.broadcast_max_rows]
