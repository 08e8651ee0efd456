"""The single-process reference of the Outbrain -> Wide & Deep feature definitions, in pandas and numpy.

It is written from the rules (docs/preprocessing.md documents them), not from the Spark job's code, so that
the Spark job can be checked value for value against a second, independent implementation of the same
definitions; it is also the single-process baseline of the preprocessing benchmark. All constants (names,
bucket counts, thresholds, file columns) come from `dlrm.data.outbrain`.

Hashing is Spark's `xxhash64`: XXH64 chained from seed 42 over the arguments (an int as 4 bytes, a long as
8, a string as its UTF-8 bytes), a null argument leaving the running hash unchanged.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
from pandas.api.types import is_integer_dtype

from dlrm.data.outbrain import (
    ASPECT_ID,
    ASPECTS,
    BAD_ROW_REASONS,
    COUNTED,
    CTR_THRESHOLDS,
    DAYS_OBSERVED,
    DISPLAY,
    DRAWS,
    LABEL,
    LAST_TRAIN_DAY,
    MAX_DAYS_SINCE_PUBLISHED,
    MS_PER_DAY,
    MULTI_HOT,
    NULL,
    NUMERICAL,
    ONE_HOT,
    PUBLISHED,
    RAW_FILES,
    TEST_PER_MILLION,
    TIMESTAMP_OFFSET_MS,
    ListFeature,
)
from preproc_spark3.xxhash64 import (
    PRIME1,
    PRIME2,
    PRIME3,
    PRIME4,
    PRIME5,
    SPARK_SEED,
    fmix,
    hash_long,
    hash_seed_literal,
    rotl,
)

_STRING_COLUMNS = frozenset({"uuid", "entity_id", "geo_location", "publish_time"})
_FLOAT_COLUMNS = frozenset({"confidence_level"})
_UINT64_MASK = (1 << 64) - 1
_SPARK_SEED_ARRAY = np.full(1, SPARK_SEED, dtype=np.uint64)  # broadcasts as every element's seed


@dataclass(frozen=True)
class OutbrainFeatures:
    """The two splits in output order and the number of bad rows per reason (every reason present)."""

    # clicked, ONE_HOT names (int64), MULTI_HOT names (tuples of int64), NUMERICAL (float32), display_id (int64)
    train: pd.DataFrame
    test: pd.DataFrame  # the same columns
    bad_rows: dict[str, int]


def reference_outbrain(raw_dir: str, seed: int = 0,
                       ctr_thresholds: Optional[Mapping[str, int]] = None) -> OutbrainFeatures:
    """The features of the raw Outbrain CSVs in `raw_dir`, split and ordered by `seed`.

    Test rows come ordered by (display_id, ad_id), train rows by xxhash64(seed, display_id, ad_id).
    `ctr_thresholds` overrides the minimum train count of some CTR_THRESHOLDS columns (small test data).
    """
    thresholds = _ctr_thresholds(ctr_thresholds)
    raw = {stem: read_raw_table(raw_dir, stem) for stem in RAW_FILES}
    bad_rows = dict.fromkeys(BAD_ROW_REASONS, 0)

    events = _first_of_key(raw["events"], "display_id", bad_rows)
    promoted = _first_of_key(raw["promoted_content"], "ad_id", bad_rows)
    meta = _fill_null_publishers(_first_of_key(raw["documents_meta"], "document_id", bad_rows))
    impossible = _impossible_timestamp(events["timestamp"])
    bad_rows["impossible_timestamp"] += int(impossible.sum())
    clicks = _kept_clicks(raw["clicks_train"], events, events["display_id"][impossible], promoted, bad_rows)

    rows = _join(clicks, events[~impossible], promoted, meta)
    is_train = _is_train(rows, seed)
    aspects = {aspect: _aspect_rows(raw[f"documents_{aspect}"], ASPECT_ID[aspect]) for aspect in ASPECTS}
    features = _features(rows, is_train, aspects, thresholds)

    displays = rows[DISPLAY].to_numpy(dtype=np.int64)
    splits = []
    for positions in (_train_positions(rows, is_train, seed), _test_positions(rows, is_train)):
        split = features.take(positions).reset_index(drop=True)
        split[DISPLAY] = displays[positions]
        splits.append(split)
    return OutbrainFeatures(train=splits[0], test=splits[1], bad_rows=bad_rows)


# --- Spark's xxhash64 --------------------------------------------------------------------------------------


def xxhash64_utf8(texts: Sequence[str], seed: int = SPARK_SEED) -> np.ndarray:
    """XXH64 of each string's UTF-8 bytes (uint64): Spark's hash of a string when `seed` is 42.

    Strings of equal byte length are hashed together, vectorised over the strings.
    """
    encoded = [text.encode("utf-8") for text in texts]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    hashes = np.empty(len(encoded), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for length in np.unique(lengths):
            rows = np.flatnonzero(lengths == length)
            joined = b"".join(encoded[row] for row in rows)
            block = np.frombuffer(joined, dtype=np.uint8).reshape(len(rows), int(length))
            hashes[rows] = _xxh64_rows(block, seed)
    return hashes


def _xxh64_rows(block: np.ndarray, seed: int) -> np.ndarray:
    """The standard XXH64 of each row of an (n, length) uint8 array."""
    count, length = block.shape
    start = np.uint64(seed & _UINT64_MASK)
    offset = 0
    if length >= 32:
        lanes = [np.full(count, value, dtype=np.uint64) for value in
                 (start + PRIME1 + PRIME2, start + PRIME2, start, start - PRIME1)]
        while offset + 32 <= length:
            lanes = [_xxh64_round(lane, _little_endian(block, offset + 8 * i, 8)) for i, lane in enumerate(lanes)]
            offset += 32
        h = rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18)
        for lane in lanes:
            h = (h ^ _xxh64_round(np.uint64(0), lane)) * PRIME1 + PRIME4
    else:
        h = np.full(count, start + PRIME5, dtype=np.uint64)
    h = h + np.uint64(length)
    while offset + 8 <= length:
        h = rotl(h ^ _xxh64_round(np.uint64(0), _little_endian(block, offset, 8)), 27) * PRIME1 + PRIME4
        offset += 8
    if offset + 4 <= length:
        h = rotl(h ^ (_little_endian(block, offset, 4) * PRIME1), 23) * PRIME2 + PRIME3
        offset += 4
    while offset < length:
        h = rotl(h ^ (block[:, offset].astype(np.uint64) * PRIME5), 11) * PRIME1
        offset += 1
    return fmix(h)


def _xxh64_round(accumulator: np.ndarray | np.uint64, lane: np.ndarray) -> np.ndarray:
    return rotl(accumulator + lane * PRIME2, 31) * PRIME1


def _little_endian(block: np.ndarray, offset: int, size: int) -> np.ndarray:
    """Bytes offset..offset+size of every row read as one little-endian unsigned int (size 4 or 8), as uint64."""
    window = np.ascontiguousarray(block[:, offset:offset + size])
    return window.view(f"<u{size}")[:, 0].astype(np.uint64)


def spark_xxhash64(values: pd.Series) -> np.ndarray:
    """Spark's `xxhash64(value)` (seed 42) per element as a signed int64.

    Integers are hashed as 8-byte longs, anything else as strings (UTF-8, each distinct string once); a
    null hashes to the seed, 42.
    """
    if is_integer_dtype(values.dtype):
        longs = values.to_numpy(dtype=np.int64, na_value=0)
        with np.errstate(over="ignore"):
            hashes = hash_long(longs, _SPARK_SEED_ARRAY).view(np.int64)
        return np.where(values.isna().to_numpy(), np.int64(SPARK_SEED), hashes)
    codes, distinct = pd.factorize(values)  # code -1 is a null
    distinct_hashes = xxhash64_utf8(list(distinct)).view(np.int64)
    return np.append(distinct_hashes, np.int64(SPARK_SEED))[codes]


def bucket_of(values: pd.Series, buckets: int) -> np.ndarray:
    """pmod(xxhash64(value), buckets): the non-negative remainder of the signed hash (int64)."""
    return spark_xxhash64(values) % buckets  # numpy's % of a positive divisor is never negative


def seeded_xxhash64(seed: int, *longs: np.ndarray) -> np.ndarray:
    """Spark's `xxhash64(lit(seed), col, ...)` over int64 columns, as signed int64.

    `lit(seed)` is an int (4 bytes) when it fits 32 bits, else a long.
    """
    h = hash_seed_literal(seed)
    with np.errstate(over="ignore"):
        for column in longs:
            h = hash_long(np.asarray(column, dtype=np.int64), h)
    return h.view(np.int64)


# --- Reading -----------------------------------------------------------------------------------------------


def read_raw_table(raw_dir: str, stem: str) -> pd.DataFrame:
    """`stem`.csv or `stem`.csv.gz with the RAW_FILES columns; `\\N` and empty fields are null.

    Integer columns are nullable Int64, strings object, confidence_level float64.
    """
    candidates = [path for path in (Path(raw_dir) / f"{stem}.csv", Path(raw_dir) / f"{stem}.csv.gz")
                  if path.exists()]
    if len(candidates) != 1:
        raise FileNotFoundError(f"expected exactly one of {stem}.csv and {stem}.csv.gz in {raw_dir}")
    columns = RAW_FILES[stem]
    strings = {column: "object" for column in columns if column in _STRING_COLUMNS}
    # The nullable backend parses integer columns natively into Int64 (exact beyond 2**53, and fast).
    table = pd.read_csv(candidates[0], dtype=strings, na_values=[NULL, ""], keep_default_na=False,
                        dtype_backend="numpy_nullable")
    if tuple(table.columns) != columns:
        raise ValueError(f"{candidates[0].name}: header {tuple(table.columns)} is not {columns}")
    wanted = {column: _column_dtype(column) for column in columns}
    not_integer = [column for column, dtype in wanted.items() if dtype == "Int64"
                   and not is_integer_dtype(table[column].dtype) and table[column].notna().any()]
    if not_integer:
        raise ValueError(f"{candidates[0].name}: columns {not_integer} hold values that are not integers")
    return table.astype(wanted)


def _column_dtype(column: str) -> str:
    if column in _STRING_COLUMNS:
        return "object"
    if column in _FLOAT_COLUMNS:
        return "float64"  # a null confidence becomes NaN
    return "Int64"


# --- Rows kept ---------------------------------------------------------------------------------------------


def _first_of_key(table: pd.DataFrame, key: str, bad_rows: dict[str, int]) -> pd.DataFrame:
    """The first row of each key in file order; later rows of a key are bad."""
    duplicate = table.duplicated(subset=key, keep="first").to_numpy()
    bad_rows["duplicate_key"] += int(duplicate.sum())
    return table[~duplicate]


def _fill_null_publishers(meta: pd.DataFrame) -> pd.DataFrame:
    """NVIDIA's fill: the k-th null publisher_id (file order, k from 1) becomes max(publisher_id) + k.

    Each such document gets a publisher of its own. With no publisher at all the maximum is taken as 0.
    """
    publisher = meta["publisher_id"].copy()
    missing = publisher.isna().to_numpy()
    highest = int(publisher.max()) if not missing.all() else 0
    publisher[missing] = highest + np.arange(1, int(missing.sum()) + 1)
    return meta.assign(publisher_id=publisher)


def _impossible_timestamp(timestamp: pd.Series) -> np.ndarray:
    """True where an event's time is negative, on day DAYS_OBSERVED or later, or missing."""
    outside = (timestamp < 0) | (timestamp // MS_PER_DAY >= DAYS_OBSERVED)
    return (timestamp.isna() | outside).to_numpy(dtype=bool, na_value=True)


def _kept_clicks(clicks: pd.DataFrame, events: pd.DataFrame, impossible_displays: pd.Series,
                 promoted: pd.DataFrame, bad_rows: dict[str, int]) -> pd.DataFrame:
    """The clicks with a possible event and a promoted ad, with their file position.

    A click dropped for several reasons counts once, for the first of: dangling display, dangling ad,
    impossible timestamp (of its event).
    """
    no_event = ~_is_in(clicks["display_id"], events["display_id"])
    no_ad = ~no_event & ~_is_in(clicks["ad_id"], promoted["ad_id"])
    bad_event = ~no_event & ~no_ad & _is_in(clicks["display_id"], impossible_displays)
    bad_rows["dangling_display"] += int(no_event.sum())
    bad_rows["dangling_ad"] += int(no_ad.sum())
    bad_rows["impossible_timestamp"] += int(bad_event.sum())
    kept = ~(no_event | no_ad | bad_event)
    return clicks[kept].assign(position=np.flatnonzero(kept))


def _is_in(values: pd.Series, keys: pd.Series) -> np.ndarray:
    """True where a value equals a non-null key (a null never matches)."""
    return values.isin(keys.dropna()).to_numpy(dtype=bool, na_value=False)


# --- Joins, split and order --------------------------------------------------------------------------------


def _join(clicks: pd.DataFrame, events: pd.DataFrame, promoted: pd.DataFrame, meta: pd.DataFrame) -> pd.DataFrame:
    """Each click with its event, its ad, and the meta data of the page's and the ad's documents."""
    event_fields = events[["display_id", "document_id", "timestamp", "platform", "geo_location"]]
    ad_fields = promoted.rename(columns={"document_id": "document_id_promo"})
    page_meta = meta.assign(publish_time=_epoch_ms(meta["publish_time"]))
    promo_meta = page_meta.rename(columns=lambda column: f"{column}_promo")
    rows = _left_join(clicks, event_fields, "display_id")
    rows = _left_join(rows, ad_fields, "ad_id")
    rows = _left_join(rows, page_meta, "document_id")
    return _left_join(rows, promo_meta, "document_id_promo")


def _left_join(left: pd.DataFrame, right: pd.DataFrame, key: str) -> pd.DataFrame:
    """SQL left join on a unique key of `right`, keeping `left`'s order; a null key matches nothing."""
    return left.merge(right[right[key].notna()], on=key, how="left", validate="many_to_one")


def _epoch_ms(publish_time: pd.Series) -> pd.Series:
    """`YYYY-MM-DD HH:MM:SS` (UTC) as ms since the Unix epoch (nullable Int64)."""
    parsed = pd.to_datetime(publish_time, format="%Y-%m-%d %H:%M:%S")
    missing = parsed.isna().to_numpy()
    milliseconds = parsed.to_numpy(dtype="datetime64[ms]").view(np.int64)
    return pd.Series(pd.arrays.IntegerArray(milliseconds, missing), index=publish_time.index)


def _is_train(rows: pd.DataFrame, seed: int) -> np.ndarray:
    """Train iff the event's day <= LAST_TRAIN_DAY and the display's draw >= TEST_PER_MILLION."""
    day = rows["timestamp"].to_numpy(dtype=np.int64) // MS_PER_DAY
    draw = seeded_xxhash64(seed, rows["display_id"].to_numpy(dtype=np.int64)) % DRAWS
    return (day <= LAST_TRAIN_DAY) & (draw >= TEST_PER_MILLION)


def _train_positions(rows: pd.DataFrame, is_train: np.ndarray, seed: int) -> np.ndarray:
    """Train rows by xxhash64(seed, display_id, ad_id) ascending, ties by (display_id, ad_id), then file order."""
    positions = np.flatnonzero(is_train)
    display, ad = _ids(rows, positions, "display_id"), _ids(rows, positions, "ad_id")
    key = seeded_xxhash64(seed, display, ad)
    return positions[np.lexsort((rows["position"].to_numpy()[positions], ad, display, key))]


def _test_positions(rows: pd.DataFrame, is_train: np.ndarray) -> np.ndarray:
    """Test rows by (display_id, ad_id), then file order."""
    positions = np.flatnonzero(~is_train)
    display, ad = _ids(rows, positions, "display_id"), _ids(rows, positions, "ad_id")
    return positions[np.lexsort((rows["position"].to_numpy()[positions], ad, display))]


def _ids(rows: pd.DataFrame, positions: np.ndarray, column: str) -> np.ndarray:
    return rows[column].to_numpy(dtype=np.int64)[positions]


# --- Features ----------------------------------------------------------------------------------------------


def _features(rows: pd.DataFrame, is_train: np.ndarray, aspects: Mapping[str, pd.DataFrame],
              thresholds: Mapping[str, int]) -> pd.DataFrame:
    """The output columns of every joined row, in output order (statistics from the train rows)."""
    columns: dict[str, object] = {LABEL: rows[LABEL].to_numpy(dtype=np.int64)}
    sources = _one_hot_sources(rows)
    for feature in ONE_HOT:
        columns[feature.name] = bucket_of(sources[feature.name], feature.buckets)
    for listed in MULTI_HOT:
        columns[listed.name] = _id_lists(rows["document_id"], aspects[listed.aspect], listed)
    numerical = _numerical(rows, is_train, aspects, thresholds)
    for name in NUMERICAL:
        columns[name] = numerical[name].astype(np.float32)
    return pd.DataFrame(columns, index=pd.RangeIndex(len(rows)))


def _one_hot_sources(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """The value each one-hot feature hashes: a joined column, or platform and geo prefixes derived from one."""
    sources = {feature.name: rows[feature.name] for feature in ONE_HOT if feature.name in rows.columns}
    sources["platform"] = rows["platform"].fillna(1) - 1
    sources["geo_location_country"] = rows["geo_location"].str.slice(0, 2)
    sources["geo_location_state"] = rows["geo_location"].str.slice(0, 5)
    return sources


def _aspect_rows(table: pd.DataFrame, id_column: str) -> pd.DataFrame:
    """documents_<aspect> as document_id, aspect (the id), confidence_level; rows without an id carry nothing."""
    rows = table.rename(columns={id_column: "aspect"})
    return rows[rows["document_id"].notna() & rows["aspect"].notna()]


def _id_lists(page_documents: pd.Series, aspect_rows: pd.DataFrame, listed: ListFeature) -> np.ndarray:
    """Per row, the bucket tuple of its page document's first `max_ids` aspects (an object array of tuples).

    Order: confidence_level descending, then aspect id ascending; each aspect once; no rows -> ().
    """
    wanted = aspect_rows[aspect_rows["document_id"].isin(page_documents.dropna().unique())]
    ordered = wanted.sort_values(["document_id", "confidence_level", "aspect"], ascending=[True, False, True])
    ordered = ordered.drop_duplicates(["document_id", "aspect"], keep="first")
    top = ordered[ordered.groupby("document_id").cumcount().to_numpy() < listed.max_ids]
    buckets = bucket_of(top["aspect"], listed.buckets)
    documents = top["document_id"].to_numpy(dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, documents[1:] != documents[:-1]]) if len(documents) else np.zeros(0, int)
    ends = np.r_[starts[1:], len(documents)]
    lists = np.empty(len(starts) + 1, dtype=object)  # the last cell: the empty list of any other document
    for cell, (start, end) in enumerate(zip(starts, ends)):
        lists[cell] = tuple(buckets[start:end])
    lists[-1] = ()
    return lists[pd.Index(documents[starts]).get_indexer(page_documents)]


def _numerical(rows: pd.DataFrame, is_train: np.ndarray, aspects: Mapping[str, pd.DataFrame],
               thresholds: Mapping[str, int]) -> dict[str, np.ndarray]:
    """The 13 numerical features in float64, by name."""
    clicked = rows[LABEL].to_numpy(dtype=np.float64)
    timestamp = rows["timestamp"].to_numpy(dtype=np.int64)
    numerical: dict[str, np.ndarray] = {}
    for column, threshold in thresholds.items():
        numerical[f"{column}_ctr"] = _ctr(rows[column], clicked, is_train, threshold)
    for column in COUNTED:
        numerical[f"{column}_count"] = _standardised_log_count(rows[column], is_train)
    for column in PUBLISHED:
        numerical[f"{column}_days_since_published"] = _log_days_since_published(timestamp, rows[column], is_train)
    for aspect, aspect_rows in aspects.items():
        numerical[f"document_id_document_id_promo_sim_{aspect}"] = _tfidf_similarity(
            rows["document_id"], rows["document_id_promo"], is_train, aspect_rows)
    return numerical


def _ctr(values: pd.Series, clicked: np.ndarray, is_train: np.ndarray, threshold: int) -> np.ndarray:
    """Train clicks / train rows of each value when it has at least `threshold` train rows, else 0."""
    train = pd.DataFrame({"value": values[is_train], "clicked": clicked[is_train]})
    stats = train.groupby("value")["clicked"].agg(["sum", "count"])  # null values are not grouped
    rate = (stats["sum"] / stats["count"]).where(stats["count"] >= threshold, 0.0)
    return _lookup(values, rate, default=0.0)


def _standardised_log_count(values: pd.Series, is_train: np.ndarray) -> np.ndarray:
    """ln(1 + train count of the value), standardised by its mean and sample std (ddof 1) over the train rows.

    When the train rows' values are all equal (or fewer than two) the std is 0 and only the mean is taken off.
    """
    log_count = np.log1p(_lookup(values, values[is_train].value_counts(), default=0.0))
    train = log_count[is_train]
    mean = train.mean() if len(train) else np.nan
    if len(train) < 2 or train.min() == train.max():
        return log_count - mean
    return (log_count - mean) / train.std(ddof=1)


def _log_days_since_published(timestamp: np.ndarray, publish_ms: pd.Series, is_train: np.ndarray) -> np.ndarray:
    """ln(1 + whole days from publication to the event): outside 0..MAX_DAYS_SINCE_PUBLISHED -> 0; unknown ->
    the median over the train rows with a known publication time."""
    known = publish_ms.notna().to_numpy()
    published = publish_ms.to_numpy(dtype=np.int64, na_value=0)
    days = (TIMESTAMP_OFFSET_MS + timestamp - published) // MS_PER_DAY  # floor, also for negative spans
    value = np.where((days >= 0) & (days <= MAX_DAYS_SINCE_PUBLISHED), days, 0).astype(np.float64)
    train_known = value[is_train & known]
    median = np.median(train_known) if len(train_known) else np.nan  # even count: mean of the middle two
    return np.log1p(np.where(known, value, median))


def _tfidf_similarity(page_documents: pd.Series, ad_documents: pd.Series, is_train: np.ndarray,
                      aspect_rows: pd.DataFrame) -> np.ndarray:
    """Cosine of the TF-IDF vectors of each row's page and ad documents; 0 when either has no weight."""
    referenced = pd.concat([page_documents, ad_documents]).dropna().unique()
    rows = aspect_rows[aspect_rows["document_id"].isin(referenced)]
    rows = rows.assign(aspect=pd.factorize(rows["aspect"])[0])  # any id (an entity string too) as an int code
    train_documents = pd.concat([page_documents[is_train], ad_documents[is_train]]).dropna().unique()
    vectors = _unit_tfidf_vectors(rows, _idf(rows, train_documents))
    pairs = pd.DataFrame({"page": page_documents.array, "ad": ad_documents.array})
    distinct_pairs = pairs.dropna().drop_duplicates()
    terms = distinct_pairs.merge(vectors.rename(columns={"document_id": "page", "weight": "page_weight"}), on="page")
    terms = terms.merge(vectors.rename(columns={"document_id": "ad", "weight": "ad_weight"}), on=["ad", "aspect"])
    dot = (terms["page_weight"] * terms["ad_weight"]).groupby([terms["page"], terms["ad"]]).sum()
    similarity = pairs.merge(dot.rename("similarity").reset_index(), on=["page", "ad"], how="left")["similarity"]
    return similarity.fillna(0.0).to_numpy(dtype=np.float64)


def _idf(rows: pd.DataFrame, train_documents: np.ndarray) -> pd.Series:
    """ln(N / df(aspect)) over the train-referenced documents that have rows (N of them); by aspect."""
    collection = rows[rows["document_id"].isin(train_documents)]
    documents_with_aspect = collection.drop_duplicates(["document_id", "aspect"]).groupby("aspect").size()
    return np.log(collection["document_id"].nunique() / documents_with_aspect)


def _unit_tfidf_vectors(rows: pd.DataFrame, idf: pd.Series) -> pd.DataFrame:
    """document_id, aspect, weight: the summed confidence times idf, L2-normalised per document.

    An aspect outside the IDF's collection weighs 0; a document whose weights are all 0 stays all 0.
    """
    summed = rows.groupby(["document_id", "aspect"], as_index=False)["confidence_level"].sum()
    weight = summed["confidence_level"].to_numpy() * _lookup(summed["aspect"], idf, default=0.0)
    documents = summed["document_id"].to_numpy(dtype=np.int64)
    norm = np.sqrt(pd.Series(weight * weight).groupby(documents).transform("sum").to_numpy())
    unit = np.divide(weight, norm, out=np.zeros_like(weight), where=norm > 0)
    return summed[["document_id", "aspect"]].assign(weight=unit)


def _lookup(values: pd.Series, table: pd.Series, default: float) -> np.ndarray:
    """table[value] per value (float64), `default` where the value is null or not in the table's index."""
    position = table.index.get_indexer(values)  # -1 when absent: picks the appended default
    return np.append(table.to_numpy(dtype=np.float64), default)[position]


def _ctr_thresholds(overrides: Optional[Mapping[str, int]]) -> dict[str, int]:
    """CTR_THRESHOLDS with some minimum counts replaced (the same columns, in their order)."""
    unknown = set(overrides or {}) - set(CTR_THRESHOLDS)
    if unknown:
        raise ValueError(f"not CTR columns: {sorted(unknown)}; expected some of {list(CTR_THRESHOLDS)}")
    return {**CTR_THRESHOLDS, **(overrides or {})}
