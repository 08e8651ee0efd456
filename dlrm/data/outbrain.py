"""The Outbrain click logs: Kaggle's raw files and the Wide & Deep features made from them (pure Python
constants: the raw-data generator, the preprocessing and its reference read them).

NVIDIA's TF2 Wide & Deep feature set (DeepLearningExamples, TensorFlow2/Recommendation/WideAndDeep,
`data/outbrain/features.py` and the NVTabular workflow): 13 one-hot features hashed into their bucket
counts, 3 multi-hot lists of at most 3 ids of the page's document, 13 numerical features. The rules, and where
they differ from NVIDIA's (the hash, the IDF's collection, the order of a list) are in
docs/preprocessing.md.
"""
from __future__ import annotations

from dataclasses import dataclass

# The raw inputs: file stem -> columns, as Kaggle's data page names them. Nulls are written `\N`.
RAW_FILES: dict[str, tuple[str, ...]] = {
    "clicks_train": ("display_id", "ad_id", "clicked"),
    "events": ("display_id", "uuid", "document_id", "timestamp", "platform", "geo_location"),
    "promoted_content": ("ad_id", "document_id", "campaign_id", "advertiser_id"),
    "documents_meta": ("document_id", "source_id", "publisher_id", "publish_time"),
    "documents_topics": ("document_id", "topic_id", "confidence_level"),
    "documents_entities": ("document_id", "entity_id", "confidence_level"),
    "documents_categories": ("document_id", "category_id", "confidence_level"),
}
NULL = "\\N"
# Event timestamps are milliseconds after this instant (ms since the Unix epoch, UTC): Kaggle's offset.
TIMESTAMP_OFFSET_MS = 1465876799998
MS_PER_DAY = 86_400_000


@dataclass(frozen=True)
class HashedFeature:
    name: str
    buckets: int


@dataclass(frozen=True)
class ListFeature:
    name: str
    buckets: int
    aspect: str  # the documents_<aspect> table its ids come from
    max_ids: int = 3


# The 13 one-hot features and NVIDIA's bucket counts (HASH_BUCKET_SIZES).
ONE_HOT = (
    HashedFeature("document_id", 300_000),
    HashedFeature("ad_id", 250_000),
    HashedFeature("document_id_promo", 100_000),
    HashedFeature("campaign_id", 5_000),
    HashedFeature("source_id", 4_000),
    HashedFeature("source_id_promo", 4_000),
    HashedFeature("geo_location", 2_500),
    HashedFeature("advertiser_id", 2_500),
    HashedFeature("geo_location_state", 2_000),
    HashedFeature("publisher_id", 1_000),
    HashedFeature("publisher_id_promo", 1_000),
    HashedFeature("geo_location_country", 300),
    HashedFeature("platform", 4),
)
# The page (event) document's aspects, at most 3 ids each.
MULTI_HOT = (
    ListFeature("topic_id_list", 350, "topics"),
    ListFeature("entity_id_list", 10_000, "entities"),
    ListFeature("category_id_list", 100, "categories"),
)
ASPECTS = ("categories", "topics", "entities")
ASPECT_ID = {"categories": "category_id", "topics": "topic_id", "entities": "entity_id"}

# Click-through rates of these raw ids over the training split; 0 below the count threshold.
CTR_THRESHOLDS = {"ad_id": 5, "source_id_promo": 10, "publisher_id_promo": 10, "advertiser_id": 10,
                  "campaign_id": 10, "document_id_promo": 5}
COUNTED = ("ad_id", "document_id_promo")  # log1p(training count), standardised over the training rows
PUBLISHED = ("publish_time", "publish_time_promo")  # days since published: 0..3650, else 0; null -> median
MAX_DAYS_SINCE_PUBLISHED = 3650

# NVIDIA's numerical features in their order (NUMERIC_COLUMNS).
NUMERICAL = (
    "document_id_document_id_promo_sim_categories",
    "document_id_document_id_promo_sim_topics",
    "document_id_document_id_promo_sim_entities",
    "document_id_promo_ctr",
    "publisher_id_promo_ctr",
    "source_id_promo_ctr",
    "document_id_promo_count",
    "publish_time_days_since_published",
    "ad_id_ctr",
    "advertiser_id_ctr",
    "campaign_id_ctr",
    "ad_id_count",
    "publish_time_promo_days_since_published",
)
LABEL = "clicked"
DISPLAY = "display_id"  # the test mapping's `map` channel: MAP@12 groups by it

# The split (NVIDIA's rule, with a stable per-display draw in place of a random generator's): days
# 0..LAST_TRAIN_DAY go to train unless the display's draw (uniform over 0..DRAWS-1) is below
# TEST_PER_MILLION; later days all go to test.
LAST_TRAIN_DAY = 10
DRAWS = 1_000_000
TEST_PER_MILLION = 200_000
# Kaggle's events span days 0..14 (14 to 28 June 2016): a later day, or a negative time, is impossible.
DAYS_OBSERVED = 15

# Why a row is bad (not in the output; the job quarantines it with its file and line).
BAD_ROW_REASONS = ("duplicate_key", "dangling_display", "dangling_ad", "impossible_timestamp")
