"""Public facts of NVIDIA's TF2 Wide & Deep (Outbrain) used by the preset, the generator and the model
(pure Python, no TensorFlow).

Source: NVIDIA DeepLearningExamples, TensorFlow2 Recommendation WideAndDeep (June 2022 release): 13
numerical features, 13 one-hot and 3 multi-hot (hotness 3) categorical features; total embedding width
1235 and ~92M parameters with the default deep MLP (5 x 1024). The order of the features below is the
table order of a batch: the one-hot ones, then the multi-hot ones. NVIDIA lists (dim, cardinality) pairs
and feature names separately; the pairing of names to sizes here follows their meaning (ids, locations).
"""
from __future__ import annotations

from dataclasses import dataclass

from dlrm.features import TableConfig


@dataclass(frozen=True)
class ReferenceFeature:
    name: str
    cardinality: int
    dim: int
    hotness: int = 1  # > 1: a multi-hot bag of up to `hotness` ids


ONE_HOT_FEATURES = (
    ReferenceFeature("ad_id", 250000, 128),
    ReferenceFeature("document_id", 300000, 128),
    ReferenceFeature("platform", 4, 19),
    ReferenceFeature("document_id_promo", 100000, 128),
    ReferenceFeature("campaign_id", 5000, 128),
    ReferenceFeature("advertiser_id", 2500, 64),
    ReferenceFeature("source_id", 4000, 64),
    ReferenceFeature("geo_location", 4000, 64),
    ReferenceFeature("geo_location_country", 300, 64),
    ReferenceFeature("geo_location_state", 2000, 64),
    ReferenceFeature("publisher_id", 1000, 64),
    ReferenceFeature("source_id_promo", 2500, 64),
    ReferenceFeature("publisher_id_promo", 1000, 64),
)
MULTI_HOT_FEATURES = (
    ReferenceFeature("topic_id_list", 350, 64, 3),
    ReferenceFeature("entity_id_list", 10000, 64, 3),
    ReferenceFeature("category_id_list", 100, 64, 3),
)
FEATURES = ONE_HOT_FEATURES + MULTI_HOT_FEATURES
NUMERICAL_FEATURES = (
    "doc_event_doc_ad_sim_categories", "doc_event_doc_ad_sim_topics", "doc_event_doc_ad_sim_entities",
    "pop_document_id", "pop_publisher_id", "pop_source_id", "pop_ad_id", "pop_advertiser_id", "pop_campaign_id",
    "doc_views_log_01scaled", "ad_views_log_01scaled", "doc_event_days_since_published_log_01scaled",
    "doc_ad_days_since_published_log_01scaled",
)
GROUP_FEATURE = "display_id"
LABEL = "clicked"
DEEP_HIDDEN_UNITS = (1024, 1024, 1024, 1024, 1024)
EMBEDDING_WIDTH = 1235  # sum of the deep embedding dims, as NVIDIA's README states


def reference_tables(combiner: str = "sum") -> tuple[TableConfig, ...]:
    """The reference's deep tables, in batch order (one-hot, then multi-hot), with their own dims."""
    return tuple(TableConfig(f.name, f.cardinality, f.dim, hotness=f.hotness, combiner=combiner,
                             multi_hot=f.hotness > 1) for f in FEATURES)
