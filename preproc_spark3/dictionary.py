"""Per-feature dictionaries: count categorical values over the dictionary days, threshold, number them.

Rule: a value seen `count >= T` times (T per feature; T=0 keeps everything) gets an id in 1..n, in
descending count order, ties broken by ascending value (the hash read as an unsigned hex number).
Id 0 is shared by missing, unseen and below-threshold values, so a table has n+1 rows.
"""
from __future__ import annotations

from preproc_spark3.config import CATEGORICAL_COLUMNS


def build_dictionary(rows, thresholds: tuple[int, ...]):
    """rows: well-formed parsed rows of the dictionary days -> DataFrame[feature, value, count, id].

    These are the parquet columns of <out_dir>/dictionary; feature is the 0-based index (C1 = 0).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    values = rows.select(F.posexplode(F.array(*[F.col(c) for c in CATEGORICAL_COLUMNS])).alias("feature", "value"))
    counts = values.filter(F.col("value").isNotNull()).groupBy("feature", "value").agg(F.count(F.lit(1)).alias("count"))
    threshold = F.element_at(F.array(*[F.lit(int(t)) for t in thresholds]), F.col("feature") + 1)
    kept = counts.filter(F.col("count") >= threshold)
    order = Window.partitionBy("feature").orderBy(F.col("count").desc(), F.col("value").asc())
    ids = F.row_number().over(order).cast("int").alias("id")
    return kept.select(F.col("feature").cast("int"), "value", "count", ids)


def cardinalities(dictionary) -> list[int]:
    """Table sizes n+1 (id 0 included), in CATEGORICAL_COLUMNS order; a feature with no kept value has 1."""
    from pyspark.sql import functions as F

    sizes = {row["feature"]: row["n"] for row in dictionary.groupBy("feature").agg(F.max("id").alias("n")).collect()}
    return [sizes.get(i, 0) + 1 for i in range(len(CATEGORICAL_COLUMNS))]
