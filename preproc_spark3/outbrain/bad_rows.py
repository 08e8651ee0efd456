"""Which rows the dataset keeps; the others, with their file and line, make the quarantine.

Bad (BAD_ROW_REASONS): a later row of a key already seen (display in events, ad in promoted_content,
document in documents_meta; a null key is a key like any other); a click whose display has no event or
whose ad has no promoted_content row (a null id matches nothing); an event whose timestamp is null,
negative or on day DAYS_OBSERVED or later, and its clicks. A click bad for several reasons counts once, for
the first of dangling_display, dangling_ad, impossible_timestamp. Unreadable lines (`raw`) come first:
they are not rows at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlrm.data.outbrain import DAYS_OBSERVED, MS_PER_DAY
from preproc_spark3.outbrain.raw import KIND, LINE, REASON, TEXT, RawFile, offsets_in_order

# The quarantine's columns: the file's RAW_FILES position and name, the line, why, the line as read.
QUARANTINE_COLUMNS = ("file_order", "file", LINE, KIND, REASON, TEXT)
KEYS = {"events": "display_id", "promoted_content": "ad_id", "documents_meta": "document_id"}
NUMBERING_BLOCK_LINES = 1 << 16  # the most rows one step of the null publishers' numbering holds


@dataclass
class KeptRows:
    """The rows the features are made of (DataFrames) and the quarantine (every other data line)."""

    clicks: Any  # display_id, ad_id, clicked, line: clicks with a possible event and a promoted ad
    events: Any  # one per display, possible timestamp
    promoted: Any  # one per ad
    meta: Any  # one per document, null publisher_id filled
    aspects: dict[str, Any]  # stem -> readable rows of documents_<aspect>
    quarantine: Any


def keep_rows(tables: dict[str, Any], files: dict[str, RawFile]) -> KeptRows:
    """Split the parsed tables (stem -> read_table DataFrame) into kept rows and the quarantine."""
    from pyspark.sql import functions as F

    quarantined = []

    def bad(stem: str, rows, kind, reason):
        source = (F.lit(files[stem].order).alias("file_order"), F.lit(files[stem].name).alias("file"))
        quarantined.append(rows.select(*source, LINE, kind.alias(KIND), reason.alias(REASON), TEXT))

    readable = {}
    for stem, table in tables.items():
        broken = table.where(F.col(KIND).isNotNull())
        bad(stem, broken, F.col(KIND), F.col(REASON))
        readable[stem] = table.where(F.col(KIND).isNull())
    first = {}
    for stem, key in KEYS.items():
        first[stem], later = _first_of_key(readable[stem], key)
        bad(stem, later, F.lit("duplicate_key"),
            F.concat(F.lit(f"{key} "), F.coalesce(F.col(key).cast("string"), F.lit("null")),
                     F.lit(" already seen at line "), F.col("first_line").cast("string")))
    events = first["events"]
    impossible = (F.col("timestamp").isNull() | (F.col("timestamp") < 0)
                  | (F.floor(F.col("timestamp") / MS_PER_DAY) >= DAYS_OBSERVED))
    bad("events", events.where(impossible), F.lit("impossible_timestamp"),
        F.concat(F.lit("timestamp "), F.coalesce(F.col("timestamp").cast("string"), F.lit("null")),
                 F.lit(f" is not within days 0..{DAYS_OBSERVED - 1}")))
    clicks = _click_status(readable["clicks_train"], events.select("display_id", (~impossible).alias("_possible")),
                           first["promoted_content"].select("ad_id"))
    bad("clicks_train", clicks.where(F.col("_status").isNotNull()), F.col("_status"), F.col("_why"))
    return KeptRows(clicks=clicks.where(F.col("_status").isNull()).select("display_id", "ad_id", "clicked", LINE),
                    events=events.where(~impossible), promoted=first["promoted_content"],
                    meta=fill_null_publishers(first["documents_meta"]),
                    aspects={stem: readable[stem] for stem in readable if stem.startswith("documents_")
                             and stem != "documents_meta"},
                    quarantine=_union(quarantined))


def _first_of_key(table, key: str):
    """(the first row of each key in file order, the later rows with `first_line`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy(key)
    ranked = table.withColumn("first_line", F.min(LINE).over(by_key))
    return (ranked.where(F.col(LINE) == F.col("first_line")).drop("first_line"),
            ranked.where(F.col(LINE) != F.col("first_line")))


def _click_status(clicks, events, promoted):
    """clicks with `_status` (the BAD_ROW_REASONS of a bad click, else null) and `_why`."""
    from pyspark.sql import functions as F

    joined = (clicks.join(events.withColumn("_event", F.lit(True)), "display_id", "left")
              .join(promoted.withColumn("_ad", F.lit(True)), "ad_id", "left"))
    display, ad = F.coalesce(F.col("display_id").cast("string"), F.lit("null")), \
        F.coalesce(F.col("ad_id").cast("string"), F.lit("null"))
    status = (F.when(F.col("_event").isNull(), F.lit("dangling_display"))
              .when(F.col("_ad").isNull(), F.lit("dangling_ad"))
              .when(~F.col("_possible"), F.lit("impossible_timestamp")))
    why = (F.when(F.col("_event").isNull(), F.concat(F.lit("display_id "), display, F.lit(" has no event")))
           .when(F.col("_ad").isNull(), F.concat(F.lit("ad_id "), ad, F.lit(" has no promoted_content row")))
           .when(~F.col("_possible"), F.concat(F.lit("the event of display_id "), display,
                                               F.lit(" has an impossible timestamp"))))
    return joined.withColumn("_status", status).withColumn("_why", why)


def fill_null_publishers(meta, block_lines: int = NUMBERING_BLOCK_LINES):
    """The k-th null publisher_id (file order, from 1) becomes max(publisher_id) + k (max 0 if all are null).

    k is counted per block of `block_lines` lines (the nulls of earlier blocks, then the row's rank within its
    own block), so no step holds more than a block's rows, whatever the file's size."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    highest = meta.agg(F.coalesce(F.max("publisher_id"), F.lit(0)).alias("_highest"))
    nulls = meta.where(F.col("publisher_id").isNull()).withColumn("_block", F.floor(F.col(LINE) / block_lines))
    counts = nulls.groupBy("_block").agg(F.count(F.lit(1)).alias("_nulls"))
    before = offsets_in_order(counts, "_block", "_block", "_nulls", "_before")
    rank = F.row_number().over(Window.partitionBy("_block").orderBy(LINE))
    filled = (nulls.join(F.broadcast(before), "_block").crossJoin(F.broadcast(highest))
              .withColumn("publisher_id", (F.col("_highest") + F.col("_before") + rank).cast("long")))
    return meta.where(F.col("publisher_id").isNotNull()).unionByName(filled.drop("_block", "_before", "_highest"))


def _union(frames: list):
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result
