"""The Wide & Deep features of the kept rows, as DataFrame transformations (the rules: docs/preprocessing.md).

`feature_rows` joins each click to its event, ad and documents, splits and orders by the seed, and adds
the 13 hashed ids, the 3 id lists and the 13 numericals (float64). Every statistic comes from the train rows
and stays a Spark join (per-value tables); only one row of scalars (means, standard deviations, medians)
comes to the driver.

The joined rows are read three times: for the per-value counts, for their distinct document pairs, and to
join the results. Everything per document (id lists, TF-IDF similarities) is computed over the pairs, fewer
than the rows, and reaches the rows in one join. Local checkpoints cut the plan at each table that several
later steps read, so none is computed twice.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from dlrm.data.outbrain import (
    ASPECT_ID,
    COUNTED,
    DISPLAY,
    DRAWS,
    LABEL,
    LAST_TRAIN_DAY,
    MAX_DAYS_SINCE_PUBLISHED,
    MS_PER_DAY,
    MULTI_HOT,
    NUMERICAL,
    ONE_HOT,
    PUBLISHED,
    TEST_PER_MILLION,
    TIMESTAMP_OFFSET_MS,
)
from preproc_spark3.config import PreprocessError
from preproc_spark3.outbrain.bad_rows import KeptRows
from preproc_spark3.outbrain.raw import LINE

IS_TRAIN, TRAIN_KEY = "is_train", "train_key"
ASPECT = "aspect"  # which documents_<aspect> table a term comes from
RAW_AD = "raw_ad_id"  # the ad's id itself (the column ad_id is its bucket)
TRAIN_ORDER = (TRAIN_KEY, DISPLAY, RAW_AD, LINE)  # xxhash64(seed, display_id, ad_id), ties in file order
TEST_ORDER = (DISPLAY, RAW_AD, LINE)
PAGE, AD = "document_id", "document_id_promo"  # the page's document and the ad's
OUTPUT_COLUMNS = (LABEL, DISPLAY, *(f.name for f in ONE_HOT), *(f.name for f in MULTI_HOT), *NUMERICAL)


def bucket(column, buckets: int):
    """pmod(xxhash64(value), buckets): Spark's hash (seed 42; a long as 8 bytes, a string as UTF-8, null -> 42)."""
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64(column), F.lit(buckets))


def joined_rows(kept: KeptRows, seed: int):
    """Each kept click with its event, ad and both documents' meta data, `is_train` and `train_key`."""
    from pyspark.sql import functions as F

    events = kept.events.select(DISPLAY, "document_id", "timestamp", "platform", "geo_location")
    ads = kept.promoted.select("ad_id", F.col("document_id").alias("document_id_promo"), "campaign_id",
                               "advertiser_id")
    meta = kept.meta.select("document_id", "source_id", "publisher_id", "publish_time")
    promo_meta = meta.select(*(F.col(c).alias(f"{c}_promo") for c in meta.columns))
    rows = (kept.clicks.join(events, DISPLAY).join(ads, "ad_id")
            .join(meta, "document_id", "left").join(promo_meta, "document_id_promo", "left"))
    seed_literal = F.lit(seed)  # an int when it fits 32 bits, else a long: as the rule's xxhash64(seed, ...)
    day = F.floor(F.col("timestamp") / MS_PER_DAY)
    draw = F.pmod(F.xxhash64(seed_literal, F.col(DISPLAY)), F.lit(DRAWS))
    return (rows.withColumn(IS_TRAIN, (day <= LAST_TRAIN_DAY) & (draw >= TEST_PER_MILLION))
            .withColumn(TRAIN_KEY, F.xxhash64(seed_literal, F.col(DISPLAY), F.col("ad_id"))))


def hashed_ids(rows):
    """The 13 one-hot ids: each value's bucket; platform null -> 1 then minus 1, geo prefixes of 2 / 5 chars."""
    from pyspark.sql import functions as F

    sources = {"platform": (F.coalesce(F.col("platform"), F.lit(1)) - 1).cast("long"),
               "geo_location_country": F.substring("geo_location", 1, 2),
               "geo_location_state": F.substring("geo_location", 1, 5)}
    return [bucket(sources.get(f.name, F.col(f.name)), f.buckets).alias(f.name) for f in ONE_HOT]


def aspect_terms(aspects: Mapping[str, Any]):
    """The three documents_<aspect> tables as one: aspect, document_id, term (the id as text), term_long (a
    numeric id, for its order), bucket (the id's multi-hot bucket), confidence_level; rows with a null id or
    document are dropped (they carry nothing)."""
    from pyspark.sql import functions as F

    frames = []
    for listed in MULTI_HOT:
        term = F.col(ASPECT_ID[listed.aspect])
        table = aspects[f"documents_{listed.aspect}"]
        numeric = dict(table.dtypes)[ASPECT_ID[listed.aspect]] != "string"
        frames.append(table.where(F.col("document_id").isNotNull() & term.isNotNull()).select(
            F.lit(listed.aspect).alias(ASPECT), "document_id", term.cast("string").alias("term"),
            (term if numeric else F.lit(None)).cast("long").alias("term_long"),
            bucket(term, listed.buckets).alias("bucket"), "confidence_level"))
    terms = frames[0]
    for frame in frames[1:]:
        terms = terms.unionByName(frame)
    return terms


def id_lists(terms):
    """document_id -> each MULTI_HOT list: the first `max_ids` aspect ids' buckets, by confidence descending
    then id, each id once (null when the document has none)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    best = terms.groupBy(ASPECT, "document_id", "term", "term_long", "bucket").agg(
        F.max("confidence_level").alias("confidence"))
    order = Window.partitionBy(ASPECT, "document_id").orderBy(
        F.col("confidence").desc_nulls_last(), F.col("term_long"), F.col("term"))
    top = best.withColumn("rank", F.row_number().over(order))
    lists = []
    for listed in MULTI_HOT:
        mine = (F.col(ASPECT) == listed.aspect) & (F.col("rank") <= listed.max_ids)
        pairs = F.sort_array(F.collect_list(F.when(mine, F.struct("rank", "bucket"))))
        lists.append(F.transform(pairs, lambda pair: pair["bucket"]).alias(listed.name))
    return top.groupBy("document_id").agg(*lists)


def value_statistics(rows, columns: tuple[str, ...]):
    """(column, value) -> train clicks and train rows of each non-null value of the (long) `columns`."""
    from pyspark.sql import functions as F

    pairs = F.explode(F.array(*(F.struct(F.lit(c).alias("column"), F.col(c).cast("long").alias("value"))
                                for c in columns)))
    return (rows.where(F.col(IS_TRAIN)).select(LABEL, pairs.alias("pair"))
            .select(LABEL, "pair.column", "pair.value").where(F.col("value").isNotNull())
            .groupBy("column", "value").agg(F.sum(LABEL).alias("clicks"), F.count(F.lit(1)).alias("count")))


def _per_value(statistics, column: str, threshold: Optional[int]):
    """One column's lookup: `<column>_ctr` (clicks / count when count >= threshold, else 0) or
    `<column>_log_count` (ln(1 + count)) when threshold is None."""
    from pyspark.sql import functions as F

    if threshold is None:
        value = F.log1p(F.col("count").cast("double")).alias(f"{column}_log_count")
    else:
        rate = F.when(F.col("count") >= threshold, F.col("clicks") / F.col("count")).otherwise(F.lit(0.0))
        value = rate.cast("double").alias(f"{column}_ctr")
    return statistics.where(F.col("column") == column).select(F.col("value").alias(column), value)


def document_pairs(rows):
    """The distinct (document_id, document_id_promo, is_train) of `rows`, nulls included: every per-document
    statistic needs only these."""
    return rows.select(PAGE, AD, IS_TRAIN).distinct()


def documents(pairs):
    """The distinct non-null documents on either side of `pairs`."""
    from pyspark.sql import functions as F

    return (pairs.select(F.col(PAGE).alias("document_id")).union(pairs.select(F.col(AD).alias("document_id")))
            .where(F.col("document_id").isNotNull()).distinct())


def tfidf_similarities(pairs, terms):
    """(document_id, document_id_promo) -> `sim_<aspect>`: the cosine of the two documents' TF-IDF vectors
    over each aspect, a dot product of two per-document maps (term -> unit weight); no row when either
    document has no aspect rows. `pairs`: document_pairs of the rows; IDF counts the train rows' documents."""
    from pyspark.sql import functions as F

    page, ad = PAGE, AD
    collection = terms.join(documents(pairs.where(F.col(IS_TRAIN))), "document_id", "left_semi")
    sizes = collection.groupBy(ASPECT).agg(F.countDistinct("document_id").alias("n"))
    idf = (collection.select(ASPECT, "document_id", "term").distinct().groupBy(ASPECT, "term").count()
           .join(sizes, ASPECT).select(ASPECT, "term", F.log(F.col("n") / F.col("count")).alias("idf")))
    summed = terms.groupBy(ASPECT, "document_id", "term").agg(
        F.coalesce(F.sum("confidence_level"), F.lit(0.0)).alias("tf"))
    weighted = summed.join(idf, [ASPECT, "term"], "left").withColumn(
        "w", F.col("tf") * F.coalesce(F.col("idf"), F.lit(0.0)))
    norms = weighted.groupBy(ASPECT, "document_id").agg(F.sqrt(F.sum(F.col("w") * F.col("w"))).alias("norm"))
    unit = weighted.join(norms, [ASPECT, "document_id"]).select(
        ASPECT, "document_id", "term", F.when(F.col("norm") > 0, F.col("w") / F.col("norm")).otherwise(0.0).alias("w"))
    vectors = unit.groupBy("document_id").agg(*(  # per document and aspect: term -> unit weight
        F.map_from_entries(F.collect_list(F.when(F.col(ASPECT) == listed.aspect, F.struct("term", "w"))))
        .alias(listed.aspect) for listed in MULTI_HOT))
    both_known = pairs.select(page, ad).where(F.col(page).isNotNull() & F.col(ad).isNotNull()).distinct()
    sides = {side: vectors.select(F.col("document_id").alias(side),
                                  *(F.col(listed.aspect).alias(f"{side}_{listed.aspect}") for listed in MULTI_HOT))
             for side in (page, ad)}
    products = both_known.join(sides[page], page).join(sides[ad], ad)

    def cosine(aspect: str):
        ad_vector = F.col(f"{ad}_{aspect}")
        return F.aggregate(F.map_entries(F.col(f"{page}_{aspect}")), F.lit(0.0), lambda total, entry: total + entry[
            "value"] * F.coalesce(F.element_at(ad_vector, entry["key"]), F.lit(0.0))).alias(f"sim_{aspect}")

    return products.select(page, ad, *(cosine(listed.aspect) for listed in MULTI_HOT))


def _days_since_published(column: str):
    """Whole days from publication to the event, 0 outside 0..MAX_DAYS_SINCE_PUBLISHED; null if unknown."""
    from pyspark.sql import functions as F

    days = F.floor((F.lit(TIMESTAMP_OFFSET_MS) + F.col("timestamp") - F.col(column)) / MS_PER_DAY)
    inside = (days >= 0) & (days <= MAX_DAYS_SINCE_PUBLISHED)
    return F.when(F.col(column).isNull(), None).when(inside, days.cast("double")).otherwise(F.lit(0.0))


def feature_rows(kept: KeptRows, seed: int, thresholds: Mapping[str, int],
                 inputs_read: Callable[[], None] = lambda: None) -> Any:
    """Every kept click's output columns (OUTPUT_COLUMNS; numericals float64) with IS_TRAIN and the order columns.
    `inputs_read` is called once nothing reads `kept` any more, so the caller can free what it cached."""
    from pyspark.sql import functions as F

    rows = joined_rows(kept, seed).localCheckpoint()
    statistics = value_statistics(rows, tuple(dict.fromkeys([*thresholds, *COUNTED]))).localCheckpoint()
    pairs = document_pairs(rows).localCheckpoint()
    terms = aspect_terms(kept.aspects).join(documents(pairs), "document_id", "left_semi").localCheckpoint()
    inputs_read()
    per_pair = (pairs.select(PAGE, AD).distinct().join(id_lists(terms), PAGE, "left")
                .join(tfidf_similarities(pairs, terms), [PAGE, AD], "left")).localCheckpoint()
    same_pair = rows[PAGE].eqNullSafe(per_pair[PAGE]) & rows[AD].eqNullSafe(per_pair[AD])
    with_stats = rows.join(per_pair, same_pair, "left").drop(per_pair[PAGE]).drop(per_pair[AD])
    for column, threshold in thresholds.items():
        with_stats = with_stats.join(F.broadcast(_per_value(statistics, column, threshold)), column, "left")
    for column in COUNTED:
        with_stats = with_stats.join(F.broadcast(_per_value(statistics, column, None)), column, "left")
    for column in COUNTED:
        with_stats = with_stats.withColumn(f"{column}_log_count", F.coalesce(f"{column}_log_count", F.lit(0.0)))
    for column in PUBLISHED:
        with_stats = with_stats.withColumn(f"{column}_days", _days_since_published(column))
    with_stats = with_stats.localCheckpoint()  # one evaluation of the joins for the statistics and the rows
    scalars = _train_statistics(with_stats).first().asDict()  # one row: means, standard deviations, medians
    undefined = [name for name, value in scalars.items() if value is None and not name.endswith("_std")]
    if undefined:
        raise PreprocessError(f"the training split has no rows to compute {', '.join(undefined)} from (no train "
                              f"rows, or none with a known publish time): the input is too small for the split")
    numerical = {f"{column}_ctr": F.coalesce(f"{column}_ctr", F.lit(0.0)) for column in thresholds}
    for column in COUNTED:
        value, mean, std = F.col(f"{column}_log_count"), scalars[f"{column}_mean"], scalars[f"{column}_std"]
        numerical[f"{column}_count"] = (value - F.lit(mean)) / std if std else value - F.lit(mean)
    for column in PUBLISHED:
        numerical[f"{column}_days_since_published"] = F.log1p(
            F.coalesce(F.col(f"{column}_days"), F.lit(scalars[f"{column}_median"]).cast("double")))
    for listed in MULTI_HOT:
        numerical[f"document_id_document_id_promo_sim_{listed.aspect}"] = F.coalesce(
            f"sim_{listed.aspect}", F.lit(0.0))
    lists = [F.coalesce(F.col(f.name), F.array().cast("array<bigint>")).alias(f.name) for f in MULTI_HOT]
    return with_stats.select(
        F.col(IS_TRAIN), F.col(TRAIN_KEY), F.col(LINE), F.col("ad_id").alias(RAW_AD), F.col(LABEL).cast("int"),
        F.col(DISPLAY), *hashed_ids(with_stats), *lists,
        *(numerical[name].cast("double").alias(name) for name in NUMERICAL))


def _train_statistics(rows):
    """One row: the train rows' mean and sample std of each log count (std null when they are all equal or
    fewer than two) and the median of each known days-since-published."""
    from pyspark.sql import functions as F

    train = F.col(IS_TRAIN)
    aggregates = []
    for column in COUNTED:
        value = F.when(train, F.col(f"{column}_log_count"))
        varies = (F.count(value) >= 2) & (F.min(value) != F.max(value))
        aggregates += [F.mean(value).alias(f"{column}_mean"),
                       F.when(varies, F.stddev_samp(value)).alias(f"{column}_std")]
    for column in PUBLISHED:
        aggregates.append(F.percentile(F.when(train, F.col(f"{column}_days")), F.lit(0.5)).alias(f"{column}_median"))
    return rows.agg(*aggregates)
