"""The Outbrain reference, rule by rule: tiny raw CSVs written here, expected values computed by hand (the hashes
from Spark's primitives and a plain Python XXH64 written below)."""
import gzip
import math
import statistics
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from dlrm.data.outbrain import (
    DISPLAY,
    LABEL,
    MS_PER_DAY,
    MULTI_HOT,
    NUMERICAL,
    ONE_HOT,
    RAW_FILES,
    TEST_PER_MILLION,
    TIMESTAMP_OFFSET_MS,
)
from preproc_spark3.xxhash64 import SPARK_SEED, hash_int, hash_long
from tests.support.outbrain_reference import reference_outbrain, spark_xxhash64, xxhash64_utf8

# --- A plain XXH64 (one Python int per step), the independent check of the vectorised one ------------------

_M = (1 << 64) - 1
PRIME1, PRIME2, PRIME3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
PRIME4, PRIME5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, lane):
    return rotl((acc + lane * PRIME2) & _M, 31) * PRIME1 & _M


def plain_xxh64(data: bytes, seed: int) -> int:
    n, i = len(data), 0

    def word(at, size):
        return int.from_bytes(data[at:at + size], "little")

    if n >= 32:
        v = [(seed + PRIME1 + PRIME2) & _M, (seed + PRIME2) & _M, seed, (seed - PRIME1) & _M]
        while i + 32 <= n:
            v = [_round(v[j], word(i + 8 * j, 8)) for j in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & _M
        for lane in v:
            h = ((h ^ _round(0, lane)) * PRIME1 + PRIME4) & _M
    else:
        h = (seed + PRIME5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h = (rotl(h ^ _round(0, word(i, 8)), 27) * PRIME1 + PRIME4) & _M
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (word(i, 4) * PRIME1 & _M), 23) * PRIME2 + PRIME3) & _M
        i += 4
    while i < n:
        h = (rotl(h ^ (data[i] * PRIME5 & _M), 11) * PRIME1) & _M
        i += 1
    h = (h ^ (h >> 33)) * PRIME2 & _M
    h = (h ^ (h >> 29)) * PRIME3 & _M
    return h ^ (h >> 32)


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def long_bucket(value, buckets):
    """pmod(xxhash64(long), buckets); a null hashes to 42."""
    return SPARK_SEED % buckets if value is None else signed(plain_xxh64(value.to_bytes(8, "little", signed=True),
                                                                         SPARK_SEED)) % buckets


def string_bucket(text, buckets):
    return SPARK_SEED % buckets if text is None else signed(plain_xxh64(text.encode(), SPARK_SEED)) % buckets


def chained(seed, *longs):
    """Spark's xxhash64(lit(seed), longs...) from the primitives, signed."""
    with np.errstate(over="ignore"):
        first = hash_int if -(1 << 31) <= seed < (1 << 31) else hash_long
        h = first(np.array([seed], dtype=np.int64), np.uint64(SPARK_SEED))
        for value in longs:
            h = hash_long(np.array([value], dtype=np.int64), h)
    return int(h.view(np.int64)[0])


def draw(display, seed=0):
    return chained(seed, display) % 1_000_000


TRAIN_DRAWS = [d for d in range(1, 300) if draw(d) >= TEST_PER_MILLION][:40]  # train when on days 0..10
TEST_DRAWS = [d for d in range(1, 300) if draw(d) < TEST_PER_MILLION][:10]  # test whatever the day


# --- Raw files ----------------------------------------------------------------------------------------------


def event(display, document, day=0, ms=0, platform=1, geo="US>CA>807"):
    return display, "u1", document, None if day is None else day * MS_PER_DAY + ms, platform, geo


def write_raw(directory, tables, gz=False):
    """The seven files (header only where `tables` has no rows); None is written `\\N`."""
    directory.mkdir(parents=True, exist_ok=True)
    for stem, columns in RAW_FILES.items():
        lines = [",".join(columns)] + [",".join("\\N" if v is None else str(v) for v in row)
                                       for row in tables.get(stem, [])]
        data = ("\n".join(lines) + "\n").encode()
        if gz:
            (directory / f"{stem}.csv.gz").write_bytes(gzip.compress(data))
        else:
            (directory / f"{stem}.csv").write_bytes(data)
    return str(directory)


def run(tmp_path, tables, name="raw", **kwargs):
    return reference_outbrain(write_raw(tmp_path / name, tables), **kwargs)


def ad_ids(frame, ads):
    """The ad of each output row, told by its ad_id bucket (the ads chosen so that their buckets differ)."""
    by_bucket = {long_bucket(ad, 250_000): ad for ad in ads}
    assert len(by_bucket) == len(ads)
    return [by_bucket[b] for b in frame["ad_id"]]


# --- XXH64 --------------------------------------------------------------------------------------------------


def test_xxh64_published_vectors():
    expected = {"": 0xEF46DB3751D8E999, "a": 0xD24EC4F1A98C6E5B, "abc": 0x44BC2CF5AD770999}
    assert [int(h) for h in xxhash64_utf8(list(expected), seed=0)] == list(expected.values())
    assert [plain_xxh64(t.encode(), 0) for t in expected] == list(expected.values())
    # 39 bytes: one 32-byte stripe, then a 4-byte word and 3 single bytes (python-xxhash's documented example)
    assert int(xxhash64_utf8(["Nobody inspects the spammish repetition"], seed=0)[0]) == 0xFBCEA83C8A378BF1


def test_xxh64_of_long_and_mixed_strings_matches_the_plain_one():
    rng = np.random.default_rng(5)
    texts = ["".join(map(chr, rng.integers(32, 127, size=n))) for n in range(0, 101)]
    texts += ["é" * 20, "日本語のテキスト" * 3, "f9eec25663db4cd83183f5c805186f16", "US>CA>807", "SG"]
    for seed in (0, SPARK_SEED):
        assert [int(h) for h in xxhash64_utf8(texts, seed)] == [plain_xxh64(t.encode(), seed) for t in texts]


def test_xxh64_of_4_and_8_ascii_bytes_is_sparks_int_and_long_hash():
    with np.errstate(over="ignore"):
        as_int = hash_int(np.array([int.from_bytes(b"abcd", "little")]), np.uint64(SPARK_SEED))
        as_long = hash_long(np.array([int.from_bytes(b"abcdefgh", "little")]), np.uint64(SPARK_SEED))
    assert [int(h) for h in xxhash64_utf8(["abcd", "abcdefgh"])] == [int(as_int[0]), int(as_long[0])]


def test_spark_hash_of_ints_strings_and_nulls():
    ints = pd.Series([7, None, -3, 2**40], dtype="Int64")
    assert spark_xxhash64(ints).tolist() == [signed(plain_xxh64(v.to_bytes(8, "little", signed=True), 42))
                                             if v is not None else 42 for v in (7, None, -3, 2**40)]
    texts = pd.Series(["US", None, "US", "é"], dtype=object)
    assert spark_xxhash64(texts).tolist() == [signed(plain_xxh64(t.encode(), 42)) if t else 42
                                              for t in ("US", None, "US", "é")]


# --- Split and order ----------------------------------------------------------------------------------------


def split_tables():
    """Displays of 2 ads each: train draws on days 0, 5, 10; test draws on day 3; train draws on days 11, 12."""
    train_days = dict(zip(TRAIN_DRAWS[:3], (0, 5, 10)))
    late_days = dict(zip(TRAIN_DRAWS[3:5], (11, 12)))
    early_test = dict(zip(TEST_DRAWS[:2], (3, 3)))
    days = {**train_days, **late_days, **early_test}
    clicks, ads = [], []
    for display in days:
        for k in (0, 1):
            ad = 1000 + 10 * display + k
            clicks.append((display, ad, k))
            ads.append((ad, 50, 1, 1))
    events = [event(display, 40, day) for display, day in days.items()]
    return {"clicks_train": clicks, "events": events, "promoted_content": ads}, train_days, days


def test_split_by_day_and_draw_and_both_orders(tmp_path):
    tables, train_days, days = split_tables()
    out = run(tmp_path, tables)
    all_ads = [c[1] for c in tables["clicks_train"]]
    train_pairs = [(display, ad) for display, ad, _ in tables["clicks_train"] if display in train_days]
    expected_train = sorted(train_pairs, key=lambda pair: (chained(0, *pair), pair))
    assert list(zip(out.train[DISPLAY], ad_ids(out.train, all_ads))) == expected_train
    test_pairs = sorted((display, ad) for display, ad, _ in tables["clicks_train"] if display not in train_days)
    assert list(zip(out.test[DISPLAY], ad_ids(out.test, all_ads))) == test_pairs
    assert out.bad_rows == {"duplicate_key": 0, "dangling_display": 0, "dangling_ad": 0, "impossible_timestamp": 0}


def test_a_seed_beyond_32_bits_is_hashed_as_a_long(tmp_path):
    tables, _, days = split_tables()
    seed = 2**40
    out = run(tmp_path, tables, seed=seed)
    with np.errstate(over="ignore"):
        start = hash_long(np.array([seed]), np.uint64(SPARK_SEED))
        draws = {d: int(hash_long(np.array([d]), start).view(np.int64)[0]) % 1_000_000 for d in days}
    expected_test = sorted(d for d, day in days.items() if day > 10 or draws[d] < TEST_PER_MILLION)
    assert sorted(set(out.test[DISPLAY])) == expected_test
    assert len(out.train) == 2 * (len(days) - len(expected_test))


def test_output_columns_and_types(tmp_path):
    tables, _, _ = split_tables()
    out = run(tmp_path, tables)
    names = [LABEL] + [f.name for f in ONE_HOT] + [f.name for f in MULTI_HOT] + list(NUMERICAL)
    assert list(out.train.columns) == list(out.test.columns) == names + [DISPLAY]
    for frame in (out.train, out.test):
        assert all(frame[f.name].dtype == np.int64 for f in ONE_HOT) and frame[LABEL].dtype == np.int64
        assert all(frame[name].dtype == np.float32 for name in NUMERICAL)
        assert all(isinstance(cell, tuple) for f in MULTI_HOT for cell in frame[f.name])
    assert out.test[DISPLAY].dtype == np.int64 and list(out.train.index) == list(range(len(out.train)))


# --- One-hot ------------------------------------------------------------------------------------------------


def test_one_hot_buckets_nulls_platform_and_geo_prefixes(tmp_path):
    tables = {
        "clicks_train": [(1, 100, 1), (2, 101, 0), (3, 100, 0)],
        "events": [event(1, 10, 11, platform=None, geo="US>CA>807"), event(2, 11, 11, platform=3, geo="SG"),
                   event(3, 12, 11, platform=2, geo=None)],
        "promoted_content": [(100, 20, 300, 400), (101, 21, None, 2**53 + 1)],  # exact beyond a double's 2**53
        "documents_meta": [(10, 5, 6, "2016-06-01 00:00:00"), (20, 7, 8, None)],  # 11, 12, 21: no meta
    }
    test = run(tmp_path, tables).test
    expected = {
        "document_id": [long_bucket(d, 300_000) for d in (10, 11, 12)],
        "ad_id": [long_bucket(a, 250_000) for a in (100, 101, 100)],
        "document_id_promo": [long_bucket(d, 100_000) for d in (20, 21, 20)],
        "campaign_id": [long_bucket(300, 5000), 42, long_bucket(300, 5000)],
        "advertiser_id": [long_bucket(a, 2500) for a in (400, 2**53 + 1, 400)],
        "source_id": [long_bucket(5, 4000), 42, 42],
        "source_id_promo": [long_bucket(7, 4000), 42, long_bucket(7, 4000)],
        "publisher_id": [long_bucket(6, 1000), 42, 42],
        "publisher_id_promo": [long_bucket(8, 1000), 42, long_bucket(8, 1000)],
        "platform": [long_bucket(0, 4), long_bucket(2, 4), long_bucket(1, 4)],  # null -> 1 -> 0
        "geo_location": [string_bucket("US>CA>807", 2500), string_bucket("SG", 2500), 42],
        "geo_location_state": [string_bucket("US>CA", 2000), string_bucket("SG", 2000), 42],
        "geo_location_country": [string_bucket("US", 300), string_bucket("SG", 300), 42],
    }
    assert list(test[DISPLAY]) == [1, 2, 3]
    for name, buckets in expected.items():
        assert list(test[name]) == buckets, name


def test_null_publishers_get_max_plus_k_in_file_order(tmp_path):
    tables = {
        "clicks_train": [(d, 100 + d, 0) for d in (1, 2, 3, 4)],
        "events": [event(d, d, 11) for d in (1, 2, 3, 4)],
        "promoted_content": [(100 + d, 4, 1, 1) for d in (1, 2, 3, 4)],
        "documents_meta": [(1, 5, 7, None), (2, 5, None, None), (1, 5, None, None),  # a duplicate: not counted
                           (3, 5, 3, None), (4, 5, None, None)],
    }
    out = run(tmp_path, tables)
    assert list(out.test["publisher_id"]) == [long_bucket(p, 1000) for p in (7, 8, 3, 9)]
    assert set(out.test["publisher_id_promo"]) == {long_bucket(9, 1000)}
    assert out.bad_rows["duplicate_key"] == 1


# --- Lists --------------------------------------------------------------------------------------------------


def test_lists_by_confidence_then_id_three_at_most_hashed(tmp_path):
    tables = {
        "clicks_train": [(1, 100, 1), (2, 100, 0)],
        "events": [event(1, 10, 11), event(2, 11, 11)],
        "promoted_content": [(100, 20, 1, 1)],
        "documents_topics": [(10, 5, 0.5), (10, 3, 0.9), (10, 7, 0.5), (10, 1, 0.1), (10, 3, 0.2),
                             (20, 8, 1.0), (11, 2, 0.4)],  # doc 20 is the ad's: never listed
        "documents_entities": [(10, "bb", 0.3), (10, "ab", 0.3), (10, "zz", 0.9), (10, "ab", 0.1)],
        "documents_categories": [(20, 1403, 0.8)],
    }
    test = run(tmp_path, tables).test
    assert test["topic_id_list"][0] == tuple(long_bucket(t, 350) for t in (3, 5, 7))
    assert test["topic_id_list"][1] == (long_bucket(2, 350),)
    assert test["entity_id_list"][0] == tuple(string_bucket(e, 10_000) for e in ("zz", "ab", "bb"))
    assert test["entity_id_list"][1] == ()
    assert list(test["category_id_list"]) == [(), ()]
    assert all(isinstance(b, np.int64) for b in test["topic_id_list"][0])


# --- CTR and counts -----------------------------------------------------------------------------------------


def ctr_tables(with_test_only_click):
    """Five train displays: ad 100 in all (2 clicks), ad 101 in four (2 clicks); a test display of 100 and 102."""
    displays = TRAIN_DRAWS[:5]
    clicks = [(d, 100, int(i < 2)) for i, d in enumerate(displays)]
    clicks += [(d, 101, int(i in (2, 3))) for i, d in enumerate(displays[:4])]
    clicks += [(900, 100, 0), (900, 102, 1)]
    events = [event(d, 10, 1) for d in displays] + [event(900, 10, 12)]
    if with_test_only_click:
        clicks += [(901, 100, 1), (901, 101, 1)]
        events += [event(901, 10, 12)]
    ads = [(100, 20, 1, 7), (101, 21, 2, None), (102, 22, 2, 8)]
    return {"clicks_train": clicks, "events": events, "promoted_content": ads}


def test_ctr_threshold_null_unseen_and_train_only(tmp_path):
    thresholds = {"campaign_id": 4, "advertiser_id": 1}
    out = run(tmp_path, ctr_tables(False), ctr_thresholds=thresholds)
    train_ads = ad_ids(out.train, [100, 101, 102])
    expected_ad_ctr = {100: 0.4, 101: 0.0, 102: 0.0}  # 5 rows (at the threshold 5), 4 rows (below), unseen
    expected_campaign_ctr = {100: 0.4, 101: 0.5, 102: 0.5}  # campaign 2: 4 train rows, exactly its threshold 4
    expected_advertiser_ctr = {100: 0.4, 101: 0.0, 102: 0.0}  # 101's advertiser is null; 8 is unseen
    for frame in (out.train, out.test):
        ads = ad_ids(frame, [100, 101, 102])
        assert list(frame["ad_id_ctr"]) == pytest.approx([expected_ad_ctr[a] for a in ads])
        assert list(frame["campaign_id_ctr"]) == pytest.approx([expected_campaign_ctr[a] for a in ads])
        assert list(frame["advertiser_id_ctr"]) == pytest.approx([expected_advertiser_ctr[a] for a in ads])
        assert set(frame["source_id_promo_ctr"]) == {0.0}  # no meta: every value null
    assert sorted(train_ads) == [100] * 5 + [101] * 4

    with_click = run(tmp_path, ctr_tables(True), name="with_click", ctr_thresholds=thresholds)
    pd.testing.assert_frame_equal(with_click.train, out.train)
    pd.testing.assert_frame_equal(with_click.test[with_click.test[DISPLAY] == 900].reset_index(drop=True), out.test)


def test_default_thresholds_and_unknown_threshold_name(tmp_path):
    out = run(tmp_path, ctr_tables(False))
    assert set(out.train["campaign_id_ctr"]) == {0.0}  # threshold 10 > 5 rows
    with pytest.raises(ValueError, match="not CTR columns"):
        run(tmp_path, ctr_tables(False), name="other", ctr_thresholds={"geo_location": 1})


def test_counts_standardised_with_sample_std(tmp_path):
    out = run(tmp_path, ctr_tables(False))
    x = [math.log(6)] * 5 + [math.log(5)] * 4  # ln(1 + train count) of ad 100 (5 rows) and ad 101 (4 rows)
    mean, std = statistics.mean(x), statistics.stdev(x)  # stdev: ddof 1
    expected = {100: (math.log(6) - mean) / std, 101: (math.log(5) - mean) / std, 102: (0 - mean) / std}
    for frame in (out.train, out.test):
        ads = ad_ids(frame, [100, 101, 102])
        assert list(frame["ad_id_count"]) == pytest.approx([expected[a] for a in ads], rel=1e-6)
        # the ad documents 20, 21 (5 and 4 rows) and the unseen 22: the same counts as the ads
        assert list(frame["document_id_promo_count"]) == pytest.approx([expected[a] for a in ads], rel=1e-6)


def test_counts_with_zero_std_only_subtract_the_mean(tmp_path):
    tables = ctr_tables(False)
    tables["promoted_content"] = [(100, 20, 1, 7), (101, 20, 2, 7), (102, None, 2, 8)]
    out = run(tmp_path, tables)
    assert list(out.train["document_id_promo_count"]) == pytest.approx([0.0] * 9, abs=1e-6)  # all 9 rows: doc 20
    ads = ad_ids(out.test, [100, 101, 102])
    assert list(out.test["document_id_promo_count"]) == pytest.approx(
        [0.0 if a == 100 else -math.log(10) for a in ads], abs=1e-6)  # ad 102's document is null: count 0


# --- Days since published -----------------------------------------------------------------------------------


def stamp(moment):
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def test_days_since_published_range_floor_and_train_median(tmp_path):
    displays = TRAIN_DRAWS[:6]
    page_docs = dict(zip(displays, (1, 2, 3, 4, 5, 6)))
    days = dict(zip(displays, (0, 0, 0, 2, 0, 0)))
    meta = [(1, 1, 1, "2016-06-10 00:00:00"),  # event at 2016-06-14 03:59:59.998: 4 days
            (2, 1, 1, "2016-06-20 00:00:00"),  # after the event: 0
            (3, 1, 1, "1990-01-01 00:00:00"),  # more than 3650 days: 0
            (4, 1, 1, "2016-06-04 03:59:59"),  # event on day 2, at 2016-06-16 03:59:59.998: 12 days
            (5, 1, 1, None)]  # doc 6: no meta
    now = datetime.fromtimestamp((TIMESTAMP_OFFSET_MS + 11 * MS_PER_DAY + 2) / 1000, tz=timezone.utc)
    assert stamp(now) == "2016-06-25 04:00:00"  # the test events' time (day 11 + 2 ms)
    meta += [(7, 1, 1, "2016-06-24 04:00:01"),  # 1 day less 1 s: floor 0 days, in range
             (8, 1, 1, stamp(now - timedelta(days=3650))),  # exactly the maximum: kept
             (9, 1, 1, stamp(now - timedelta(days=3651))),  # one more: 0
             (20, 1, 1, "2016-06-01 00:00:00")]
    test_docs = (7, 8, 9, 5)
    tables = {
        "clicks_train": [(d, 100, 0) for d in displays] + [(900 + i, 100, 0) for i in range(len(test_docs))],
        "events": [event(d, page_docs[d], days[d]) for d in displays]
                  + [event(900 + i, doc, 11, ms=2) for i, doc in enumerate(test_docs)],
        "promoted_content": [(100, 20, 1, 1)],
        "documents_meta": meta,
    }
    out = run(tmp_path, tables)
    median = (0 + 4) / 2  # the train values 0, 0, 4, 12 (docs 2, 3, 1, 4)
    by_doc = {1: 4, 2: 0, 3: 0, 4: 12, 5: median, 6: median}
    train_docs = sorted(by_doc)
    assert sorted(out.train["publish_time_days_since_published"]) == pytest.approx(
        sorted(math.log1p(by_doc[d]) for d in train_docs), rel=1e-6)
    assert list(out.test["publish_time_days_since_published"]) == pytest.approx(
        [math.log1p(v) for v in (0, 3650, 0, median)], rel=1e-6)
    assert out.test["publish_time_promo_days_since_published"][0] == pytest.approx(math.log1p(24), rel=1e-6)


# --- TF-IDF similarity --------------------------------------------------------------------------------------


def test_tfidf_cosine_with_train_idf(tmp_path):
    t1, t2 = TRAIN_DRAWS[:2]
    tables = {
        "clicks_train": [(t1, 100, 1), (t2, 100, 0), (900, 100, 0), (901, 100, 1)],
        "events": [event(t1, 1, 0), event(t2, 3, 0), event(900, 4, 11), event(901, 5, 11)],
        "promoted_content": [(100, 2, 1, 1)],
        "documents_topics": [(1, 10, 0.6), (1, 11, 0.8),
                             (2, 10, 0.5), (2, 12, 0.3), (2, 12, 0.2),  # topic 12: 0.5 in all
                             (3, 11, 1.0),
                             (4, 10, 0.9), (4, 99, 0.7),  # 99: only in a test document, weighs 0
                             (6, 10, 1.0), (6, 12, 1.0)],  # doc 6: referenced by no click
    }
    out = run(tmp_path, tables)
    # The collection: docs 1, 2, 3 (N = 3); df: 10 -> 2, 11 -> 2, 12 -> 1.
    a, b = math.log(3 / 2), math.log(3)
    doc1 = {10: 0.6 * a / math.hypot(0.6 * a, 0.8 * a), 11: 0.8 * a / math.hypot(0.6 * a, 0.8 * a)}
    doc2 = {10: 0.5 * a / math.hypot(0.5 * a, 0.5 * b), 12: 0.5 * b / math.hypot(0.5 * a, 0.5 * b)}
    doc4 = {10: 1.0}  # 0.9 * a, alone once 99 weighs 0

    def sim(u, v):
        return sum(w * v.get(k, 0.0) for k, w in u.items())

    train_sims = sorted(out.train["document_id_document_id_promo_sim_topics"])
    assert train_sims == pytest.approx(sorted([sim(doc1, doc2), 0.0]), rel=1e-6)  # doc 3 and doc 2 share nothing
    assert list(out.test["document_id_document_id_promo_sim_topics"]) == pytest.approx(
        [sim(doc4, doc2), 0.0], rel=1e-6)  # doc 5 has no rows
    assert sim(doc1, doc2) == pytest.approx(0.6 * 0.5 * a / math.hypot(0.5 * a, 0.5 * b))
    for aspect in ("categories", "entities"):
        assert set(out.train[f"document_id_document_id_promo_sim_{aspect}"]) == {0.0}


# --- Bad rows and input files -------------------------------------------------------------------------------


def bad_row_tables():
    return {
        "events": [event(1, 10, 0), event(1, 11, 0),  # a duplicate: the first (doc 10) wins
                   event(2, 10, 0, ms=-5),  # before the first day
                   event(3, 10, 15),  # day 15
                   event(4, 10, 14, ms=MS_PER_DAY - 1),  # the last ms of day 14: kept
                   event(5, 10, None)],  # no timestamp
        "promoted_content": [(100, 20, 1, 1), (100, 21, 1, 1), (101, 20, 1, 1)],
        "documents_meta": [(10, 1, 1, None), (10, 2, 2, None)],
        "clicks_train": [(1, 100, 1), (1, 999, 0), (77, 100, 0), (2, 100, 1), (2, 101, 0), (3, 100, 0),
                         (4, 100, 1), (5, 101, 0), (77, 999, 0), (2, 999, 0)],
    }


def test_bad_rows_by_reason(tmp_path):
    out = run(tmp_path, bad_row_tables())
    assert out.bad_rows == {
        "duplicate_key": 3,  # one per file
        "dangling_display": 2,  # (77, 100), (77, 999): no event comes first
        "dangling_ad": 2,  # (1, 999), (2, 999): a missing ad comes before an impossible event
        "impossible_timestamp": 3 + 4,  # events 2, 3, 5 and their clicks (2, 100), (2, 101), (3, 100), (5, 101)
    }
    kept = pd.concat([out.train, out.test])
    assert len(kept) == 2 and sorted(kept[LABEL]) == [1, 1]  # clicks (1, 100) and (4, 100)
    assert set(kept["document_id"]) == {long_bucket(10, 300_000)}
    assert set(kept["document_id_promo"]) == {long_bucket(20, 100_000)} and set(kept["source_id"]) == {
        long_bucket(1, 4000)}
    assert 4 in set(out.test[DISPLAY])


def test_gzipped_files_read_like_plain_ones(tmp_path):
    tables = bad_row_tables()
    tables["documents_topics"] = [(10, 3, 0.5), (20, 3, 0.5)]
    tables["events"].append(event(6, 10, 1, geo="US>NY"))
    tables["clicks_train"].append((6, 101, 1))
    plain = reference_outbrain(write_raw(tmp_path / "plain", tables))
    zipped = reference_outbrain(write_raw(tmp_path / "zipped", tables, gz=True))
    assert len(plain.train) + len(plain.test) == 3
    pd.testing.assert_frame_equal(zipped.train, plain.train)
    pd.testing.assert_frame_equal(zipped.test, plain.test)
    assert zipped.bad_rows == plain.bad_rows


def test_a_missing_file_a_wrong_header_or_a_non_integer_id_is_an_error(tmp_path):
    directory = tmp_path / "raw"
    write_raw(directory, bad_row_tables())
    (directory / "events.csv").unlink()
    with pytest.raises(FileNotFoundError, match="events"):
        reference_outbrain(str(directory))
    (directory / "events.csv").write_text("display_id,uuid\n1,a\n")
    with pytest.raises(ValueError, match="header"):
        reference_outbrain(str(directory))
    write_raw(directory, {**bad_row_tables(), "promoted_content": [(100, 20, 1.5, 1)]})
    with pytest.raises(ValueError, match="campaign_id"):
        reference_outbrain(str(directory))
