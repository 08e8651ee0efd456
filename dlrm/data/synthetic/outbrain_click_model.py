"""The hidden click model of the raw Outbrain generator, over features the preprocessed data exposes.

Within a display exactly one ad is clicked, ad i with probability softmax(score)_i over the display's
ads. The score of an ad shown on a page is a sum of terms:

- advertiser, campaign, ad document (the ad's landing document) and ad effects, one draw per id (the
  ad's own is small: rare ads cannot be learned); the one-hot ids and their CTR features carry them;
- country group (US, English-speaking, other) x advertiser group and platform x campaign group
  effects: interactions of request and ad features, which the deep part learns from embeddings;
- the TF-IDF cosine of the page's and the ad document's topics and categories (the engineered
  `document_id_document_id_promo_sim_*` features; the IDF here is over every document);
- freshness: a slope on ln(1 + days since the ad document was published), the days as the
  preprocessing computes them (outside 0..MAX_DAYS_SINCE_PUBLISHED: 0; null: a median).

Terms of the page alone would cancel in the softmax, so every term depends on the ad.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from dlrm.data.outbrain import MAX_DAYS_SINCE_PUBLISHED, MS_PER_DAY, TIMESTAMP_OFFSET_MS
from dlrm.data.synthetic.outbrain_world import CATEGORY_IDS, TOPICS, AspectTable, World
from dlrm.exact_metrics import MAP_K

GROUPS = 4  # advertiser and campaign groups of the interactions
COUNTRY_GROUPS = 3
PLATFORMS = 3
SEED_STREAM = 2  # the effects are drawn from SeedSequence([seed, SEED_STREAM])
MIDDLE_OF_CLICKS_MS = int(6.5 * MS_PER_DAY)  # when the null publish times' stand-in days are measured


@dataclass(frozen=True)
class ClickModelWeights:
    """Standard deviation of each effect (per id or per matrix entry) and slope of each numerical term."""

    advertiser: float = 0.6
    campaign: float = 0.45
    ad_document: float = 0.4
    ad: float = 0.15
    country_x_advertiser_group: float = 0.5
    platform_x_campaign_group: float = 0.4
    similarity_topics: float = 2.5  # per unit of TF-IDF cosine
    similarity_categories: float = 2.0
    freshness: float = -0.25  # per unit of ln(1 + days since published)


TERMS = tuple(field.name for field in fields(ClickModelWeights))


@dataclass
class ClickModel:
    """The drawn effects of `ClickModelWeights` and what the numerical terms need."""

    weights: ClickModelWeights
    world: World
    advertiser_effect: np.ndarray
    campaign_effect: np.ndarray
    document_effect: np.ndarray
    ad_effect: np.ndarray
    advertiser_group: np.ndarray
    campaign_group: np.ndarray
    country_advertiser: np.ndarray  # [COUNTRY_GROUPS, GROUPS]
    platform_campaign: np.ndarray  # [PLATFORMS, GROUPS]
    topic_similarity: AspectSimilarity
    category_similarity: AspectSimilarity
    null_publish_days: float

    def terms(self, page: np.ndarray, timestamp: np.ndarray, platform: np.ndarray, country: np.ndarray,
              ads: np.ndarray) -> dict[str, np.ndarray]:
        """Each term of the score of the ads [n, w] (0: no ad) of n displays: page document, event
        timestamp, platform (0: null) and country group per display."""
        ad_table, w = self.world.ads, self.weights
        advertiser, campaign, document = ad_table.advertiser[ads], ad_table.campaign[ads], ad_table.document[ads]
        platform_index = np.where(platform == 0, 1, platform) - 1  # the preprocessing's fill of a null
        days = self.days_since_published(document, timestamp)
        return {
            "advertiser": self.advertiser_effect[advertiser],
            "campaign": self.campaign_effect[campaign],
            "ad_document": self.document_effect[document],
            "ad": self.ad_effect[ads],
            "country_x_advertiser_group": self.country_advertiser[country[:, None], self.advertiser_group[advertiser]],
            "platform_x_campaign_group": self.platform_campaign[platform_index[:, None], self.campaign_group[campaign]],
            "similarity_topics": w.similarity_topics * self.topic_similarity(page, document),
            "similarity_categories": w.similarity_categories * self.category_similarity(page, document),
            "freshness": w.freshness * np.log1p(days),
        }

    def score(self, page: np.ndarray, timestamp: np.ndarray, platform: np.ndarray, country: np.ndarray,
              ads: np.ndarray) -> np.ndarray:
        """The score of each ad [n, w]; -inf where there is no ad (id 0)."""
        return total_score(self.terms(page, timestamp, platform, country, ads), ads)

    def days_since_published(self, document: np.ndarray, timestamp: np.ndarray) -> np.ndarray:
        """Days from a document's publish time to the display's event ([n, w] documents, [n] timestamps),
        as the preprocessing computes them, with `null_publish_days` for a null publish time."""
        return published_days(self.world, document, timestamp[:, None], self.null_publish_days)


def total_score(terms: dict[str, np.ndarray], ads: np.ndarray) -> np.ndarray:
    """The sum of the terms, -inf where there is no ad."""
    return np.where(ads > 0, np.sum([terms[name] for name in TERMS], axis=0), -np.inf)


def published_days(world: World, document: np.ndarray, timestamp: np.ndarray, null_days: float) -> np.ndarray:
    """Days from publish time to event as the preprocessing computes them (outside 0..MAX_DAYS_SINCE_PUBLISHED:
    0), `null_days` where the publish time is null or the document has no documents_meta row."""
    documents = world.documents
    elapsed = TIMESTAMP_OFFSET_MS + timestamp - documents.publish_ms[document]
    days = np.floor_divide(elapsed, MS_PER_DAY).astype(np.float64)
    days[(days < 0) | (days > MAX_DAYS_SINCE_PUBLISHED)] = 0.0
    known = documents.publish_known[document] & documents.in_meta[document]
    return np.where(known, days, null_days)


@dataclass
class AspectSimilarity:
    """TF-IDF cosine of page documents with ad landing documents on one aspect: the landing documents'
    weights held dense (row 0: no document), the pages' looked up in the padded per-document table."""

    ids: np.ndarray  # the aspect table's ids per document [documents + 1, width]
    weights: np.ndarray  # their L2-normalised TF-IDF weights
    vocabulary: np.ndarray  # sorted aspect ids: the columns of `landing`
    landing_row: np.ndarray  # per document: its row in `landing` (0: not a landing document)
    landing: np.ndarray  # [landing documents + 1, vocabulary size]

    @classmethod
    def of(cls, table: AspectTable, vocabulary: np.ndarray, landing_documents: np.ndarray) -> "AspectSimilarity":
        weights = table.tfidf()
        landing_row = np.zeros(table.ids.shape[0], dtype=np.int64)
        landing_row[landing_documents] = np.arange(1, landing_documents.size + 1)
        landing = np.zeros((landing_documents.size + 1, vocabulary.size))
        ids = table.ids[landing_documents]
        valid = ids >= 0
        rows = np.broadcast_to(np.arange(1, landing_documents.size + 1)[:, None], ids.shape)
        landing[rows[valid], np.searchsorted(vocabulary, ids[valid])] = weights[landing_documents][valid]
        return cls(table.ids, weights, vocabulary, landing_row, landing)

    def __call__(self, page: np.ndarray, document: np.ndarray) -> np.ndarray:
        """The cosine of each display's page [n] with each of its ad documents [n, w]."""
        columns = np.searchsorted(self.vocabulary, np.maximum(self.ids[page], self.vocabulary[0]))
        page_weights = self.weights[page]  # 0 where the page has no such row
        rows = self.landing_row[document]
        total = np.zeros(document.shape)
        for k in range(columns.shape[1]):
            total += page_weights[:, k, None] * self.landing[rows, columns[:, k, None]]
        return total


def build_click_model(world: World, seed: int, weights: ClickModelWeights = ClickModelWeights()) -> ClickModel:
    """Draw the effects of the hidden model of `world` (a function of the seed only)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, SEED_STREAM]))
    ads, documents = world.ads, world.documents
    landing = ads.document[1:]
    known = documents.publish_known[landing] & documents.in_meta[landing]
    null_days = published_days(world, landing[known], np.full(int(known.sum()), MIDDLE_OF_CLICKS_MS), 0.0)
    return ClickModel(
        weights=weights, world=world,
        advertiser_effect=rng.normal(0, weights.advertiser, ads.advertisers + 1),
        campaign_effect=rng.normal(0, weights.campaign, ads.campaigns + 1),
        document_effect=rng.normal(0, weights.ad_document, documents.count + 1),
        ad_effect=rng.normal(0, weights.ad, ads.count + 1),
        advertiser_group=rng.integers(0, GROUPS, ads.advertisers + 1),
        campaign_group=rng.integers(0, GROUPS, ads.campaigns + 1),
        country_advertiser=rng.normal(0, weights.country_x_advertiser_group, (COUNTRY_GROUPS, GROUPS)),
        platform_campaign=rng.normal(0, weights.platform_x_campaign_group, (PLATFORMS, GROUPS)),
        topic_similarity=AspectSimilarity.of(documents.topics, np.arange(TOPICS), documents.landing),
        category_similarity=AspectSimilarity.of(documents.categories, CATEGORY_IDS, documents.landing),
        null_publish_days=float(np.median(null_days)) if null_days.size else 0.0)


def click_probabilities(score: np.ndarray) -> np.ndarray:
    """Softmax of each display's scores [n, w] (-inf: no ad, probability 0)."""
    shifted = np.exp(score - np.max(score, axis=1, keepdims=True))
    return shifted / np.sum(shifted, axis=1, keepdims=True)


def expected_ap(score: np.ndarray, k: int = MAP_K) -> np.ndarray:
    """Each display's expected AP@k when its ads are ranked by the true score: sum of p_i / rank_i
    over the ads ranked within the first k."""
    order = np.argsort(-score, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(1, score.shape[1] + 1), score.shape), axis=1)
    gain = np.where(rank <= k, 1.0 / rank, 0.0)
    return np.sum(click_probabilities(score) * gain, axis=1)
