"""The world behind the raw Outbrain CSVs: documents, ads and user locations, sized from the click count.

Sizes follow Kaggle's Outbrain data (87M clicks, 559k ads, 3M documents): per click count there are
`CLICKS_PER_AD` ads and `CLICKS_PER_META_ROW` documents_meta rows; ads group into campaigns and
campaigns into advertisers. Each document has a theme; its topics and categories are drawn mostly from
its theme's, so that a page and an ad document of the same theme are similar by TF-IDF. Popularity is
Zipf-like everywhere, and ids are shuffled so that an id says nothing about how popular it is.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlrm.data.outbrain import MS_PER_DAY, TIMESTAMP_OFFSET_MS
from dlrm.data.synthetic.sampling import zipf_ids

CLICKS_PER_AD = 156  # promoted_content rows (Kaggle: 87M clicks, 559k ads)
CLICKS_PER_SHOWN_AD = 180  # the ads of clicks_train (479k); the others were shown in Kaggle's test only
CLICKS_PER_META_ROW = 29
ADS_PER_CAMPAIGN = 8
CAMPAIGNS_PER_ADVERTISER = 8
ADS_PER_AD_DOCUMENT = 3
EVENT_DOCUMENT_SHARE = 0.3  # of all documents, the pages that displays are shown on
ABSENT_FROM_META = 0.01
DOCUMENTS_PER_SOURCE = 200
SOURCES_PER_PUBLISHER = 11
NULL_SOURCE_RATE = 0.001
NULL_PUBLISHER_RATE = 0.2
NULL_PUBLISH_TIME_RATE = 0.3
THEMES = 8
TOPICS = 300
TOPICS_PER_THEME = 30
# 97 category ids of Kaggle's 4-digit form (1403: group 14, member 3); each theme has 12 of them.
CATEGORY_IDS = np.array([group * 100 + member for group in range(10, 23) for member in range(8)][:97])
ENTITIES_PER_DOCUMENT = 0.44  # distinct entities per document id (Kaggle: 1.3M for 3M documents)
USERS_PER_CLICK = 1  # ~4 per event, drawn uniformly: about 88% of the events have a uuid of their own
# The click model's country groups: US, English-speaking, the others (and a null geo_location).
US_GROUP, ENGLISH_SPEAKING_GROUP, OTHER_COUNTRY_GROUP = 0, 1, 2
ENGLISH_SPEAKING = ("CA", "GB", "AU", "NZ", "IE")
US_STATES = ("CA TX FL NY PA IL OH GA NC MI NJ VA WA AZ MA TN IN MO MD WI CO MN SC AL LA KY OR OK CT UT IA NV "
             "AR MS KS NM NE ID WV HI NH ME MT RI DE SD ND AK DC VT WY").split()
OTHER_COUNTRIES = ("CA GB AU IN PH DE ZA NZ IE SG MY FR NL MX BR JP IT ES AE SE NO DK BE CH HK IL NG PK KE TH "
                   "PR A1 AP EU RO PL GR TR").split()
US_SHARE = 0.81
SEED_STREAM = 1  # the world is drawn from SeedSequence([seed, SEED_STREAM])
HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


@dataclass
class AspectTable:
    """One documents_<aspect> table held per document id (row = document id, row 0 unused): the
    document's aspect ids in descending confidence, -1 after its last row."""

    ids: np.ndarray  # [documents + 1, width] int32
    confidence: np.ndarray  # [documents + 1, width] float64, 0 where ids is -1

    @property
    def rows(self) -> int:
        return int(np.count_nonzero(self.ids >= 0))

    def tfidf(self) -> np.ndarray:
        """L2-normalised TF-IDF weights aligned with `ids`, the IDF over every document with rows."""
        valid = self.ids >= 0
        documents = np.count_nonzero(valid.any(axis=1))
        df = np.bincount(self.ids[valid])
        weights = np.zeros_like(self.confidence)
        weights[valid] = self.confidence[valid] * np.log(documents / df[self.ids[valid]])
        norm = np.sqrt(np.sum(weights**2, axis=1, keepdims=True))
        return np.divide(weights, norm, out=np.zeros_like(weights), where=norm > 0)


@dataclass
class Documents:
    """Documents 1..count (index 0 unused). 0 in `source` / `publisher` is null."""

    count: int
    theme: np.ndarray
    in_meta: np.ndarray  # bool: has a documents_meta row
    source: np.ndarray
    publisher: np.ndarray
    publish_ms: np.ndarray  # ms since the Unix epoch, whole seconds
    publish_known: np.ndarray  # bool: publish_time is not null
    topics: AspectTable
    categories: AspectTable
    entities: AspectTable  # ids index the entity pool (`entity_hex` names them)
    pages: np.ndarray  # the documents displays are shown on, most viewed first
    landing: np.ndarray  # the documents ads land on
    entity_key: int


@dataclass
class Ads:
    """Ads 1..count (index 0 unused) and their landing document, campaign and advertiser."""

    count: int
    document: np.ndarray
    campaign: np.ndarray
    advertiser: np.ndarray
    by_popularity: np.ndarray  # the ids of the ads displays show, most shown first
    campaigns: int
    advertisers: int
    by_theme: np.ndarray  # ad ids by their landing document's theme, each theme's most shown first
    theme_start: np.ndarray  # [THEMES + 1]: theme t's ads are by_theme[theme_start[t]:theme_start[t + 1]]


@dataclass
class Locations:
    """The geo_location values events draw from, with their probability and country group."""

    geo: np.ndarray  # str
    probability: np.ndarray
    country_group: np.ndarray


@dataclass
class World:
    """Everything the displays draw from; `users` uuids, named by `uuid_text`."""

    documents: Documents
    ads: Ads
    locations: Locations
    users: int
    uuid_key: int


def zipf_ranks(rng: np.random.Generator, n: int, size: int, exponent: float) -> np.ndarray:
    """`n` ranks in [0, size), P(rank k) ~ (k + 1)^-exponent."""
    return zipf_ids(rng, n, size + 1, exponent, 0.0).astype(np.int64) - 1


def covering_assignment(rng: np.random.Generator, items: int, groups: int, exponent: float) -> np.ndarray:
    """Group 1..groups of each item: Zipf-like group sizes, every group given at least one item."""
    ranks = zipf_ranks(rng, items, groups, exponent)
    first = rng.permutation(items)[:groups]
    ranks[first] = np.arange(first.size)
    return rng.permutation(groups)[ranks] + 1


def splitmix64(values: np.ndarray) -> np.ndarray:
    """A bijective scramble of uint64 values (SplitMix64's finaliser): random-looking ids from indices."""
    z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def hex_text(words: np.ndarray, digits: int) -> np.ndarray:
    """The last `digits` lowercase hex digits of each row of uint64 `words` [n, w], as str."""
    shifts = np.arange(60, -4, -4, dtype=np.uint64)
    nibbles = ((words[:, :, None] >> shifts) & np.uint64(15)).reshape(len(words), -1)[:, -digits:]
    chars = np.ascontiguousarray(HEX_DIGITS[nibbles])
    return chars.view(f"S{digits}").ravel().astype(f"U{digits}")


def uuid_text(world: World, users: np.ndarray) -> np.ndarray:
    """A user's uuid: 14 hex digits."""
    return hex_text(splitmix64(users.astype(np.uint64) ^ np.uint64(world.uuid_key))[:, None], 14)


def entity_hex(documents: Documents, entities: np.ndarray) -> np.ndarray:
    """An entity's entity_id: 32 hex digits."""
    base = entities.astype(np.uint64) * np.uint64(2) + np.uint64(documents.entity_key)
    return hex_text(np.stack([splitmix64(base), splitmix64(base + np.uint64(1))], axis=1), 32)


def later_duplicates(matrix: np.ndarray) -> np.ndarray:
    """True where a row repeats a value found earlier in that row."""
    order = np.argsort(matrix, axis=1, kind="stable")
    ordered = np.take_along_axis(matrix, order, axis=1)
    repeated = ordered[:, 1:] == ordered[:, :-1]
    mask = np.zeros(matrix.shape, dtype=bool)
    rows = np.nonzero(repeated)[0]
    mask[rows, order[:, 1:][repeated]] = True
    return mask


def pick_aspects(rng: np.random.Generator, candidates: np.ndarray, weights: np.ndarray, counts: np.ndarray,
                 width: int, confidence_beta: tuple[float, float]) -> AspectTable:
    """Per row, `counts` distinct candidates drawn without replacement by weight (Gumbel top-k), the
    first drawn with the highest confidence."""
    keys = np.log(weights) + rng.gumbel(size=candidates.shape)
    keys[later_duplicates(candidates)] = -np.inf
    order = np.argsort(-keys, axis=1)[:, :width]
    ids = np.take_along_axis(candidates, order, axis=1).astype(np.int32)
    kept = (np.arange(width) < counts[:, None]) & np.isfinite(np.take_along_axis(keys, order, axis=1))
    ids[~kept] = -1
    confidence = np.clip(-np.sort(-rng.beta(*confidence_beta, size=ids.shape), axis=1), 0.001, 1.0)
    confidence[~kept] = 0.0
    return AspectTable(ids, confidence)


def themed_aspects(rng: np.random.Generator, theme: np.ndarray, theme_lists: np.ndarray, vocabulary: np.ndarray,
                   counts: np.ndarray, width: int, confidence_beta: tuple[float, float]) -> AspectTable:
    """Aspects mostly from the document's theme list (Zipf-weighted within it), sometimes from anywhere."""
    strays = 4
    candidates = np.concatenate([theme_lists[theme], rng.choice(vocabulary, size=(theme.size, strays))], axis=1)
    in_theme = theme_lists.shape[1]
    weights = np.concatenate([0.9 / np.arange(1, in_theme + 1) / np.sum(1 / np.arange(1, in_theme + 1)),
                              np.full(strays, 0.1 / strays)])
    return pick_aspects(rng, candidates, np.broadcast_to(weights, candidates.shape), counts, width,
                        confidence_beta)


def aspect_counts(rng: np.random.Generator, n: int, coverage: float, extra_mean: float, width: int,
                  binomial: bool = False) -> np.ndarray:
    """Rows per document: 0 for the uncovered share, else 1 + a Poisson (or Binomial(2, .5)) count."""
    extra = rng.binomial(2, 0.5, size=n) if binomial else rng.poisson(extra_mean, size=n)
    counts = np.minimum(1 + extra, width)
    counts[rng.random(n) >= coverage] = 0
    return counts


def publish_times(rng: np.random.Generator, n: int) -> np.ndarray:
    """Publish instants (ms, whole seconds): mostly weeks to years before the data's first day, some
    during it, and a few more than 10 years before or after it."""
    kind = rng.choice(4, size=n, p=[0.55, 0.40, 0.03, 0.02])
    age_days = np.select([kind == 0, kind == 1, kind == 2],
                         [rng.exponential(60.0, n) - 7.0, rng.uniform(0, 8 * 365, n), rng.uniform(3700, 10_000, n)],
                         -rng.uniform(3700, 8000, n))
    ms = TIMESTAMP_OFFSET_MS - (age_days * MS_PER_DAY).astype(np.int64)
    return ms // 1000 * 1000


def build_documents(rng: np.random.Generator, count: int, ad_documents: int) -> Documents:
    """Documents 1..count, `ad_documents` of them ads' landing documents (half of those pages too)."""
    size = count + 1
    theme = zipf_ranks(rng, size, THEMES, 0.8)
    topic_lists = np.stack([rng.choice(TOPICS, TOPICS_PER_THEME, replace=False) for _ in range(THEMES)])
    category_lists = CATEGORY_IDS[:96].reshape(THEMES, -1)
    topics = themed_aspects(rng, theme, topic_lists, np.arange(TOPICS), aspect_counts(rng, size, 0.83, 3.5, 8), 8,
                            (1.2, 4.0))
    categories = themed_aspects(rng, theme, category_lists, CATEGORY_IDS,
                                aspect_counts(rng, size, 0.94, 0.0, 3, binomial=True), 3, (2.0, 1.0))
    pool = max(20, int(ENTITIES_PER_DOCUMENT * count))
    candidates = zipf_ranks(rng, size * 12, pool, 0.9).reshape(size, 12)
    entities = pick_aspects(rng, candidates, np.ones(candidates.shape), aspect_counts(rng, size, 0.6, 2.0, 10), 10,
                            (2.0, 1.5))
    for table in (topics, categories, entities):  # there is no document 0
        table.ids[0], table.confidence[0] = -1, 0.0
    sources = max(4, count // DOCUMENTS_PER_SOURCE)
    publishers = max(2, sources // SOURCES_PER_PUBLISHER)
    publisher_of_source = np.concatenate([[0], covering_assignment(rng, sources, publishers, 1.0)])
    source = covering_assignment(rng, size, sources, 1.0)
    publisher = publisher_of_source[source]
    source[rng.random(size) < NULL_SOURCE_RATE] = 0
    publisher[rng.random(size) < NULL_PUBLISHER_RATE] = 0
    order = rng.permutation(count) + 1
    first_page = ad_documents // 2
    pages = order[first_page:first_page + max(10, int(EVENT_DOCUMENT_SHARE * count))]
    in_meta = rng.random(size) >= ABSENT_FROM_META
    in_meta[0] = False
    return Documents(count=count, theme=theme, in_meta=in_meta, source=source,
                     publisher=publisher, publish_ms=publish_times(rng, size),
                     publish_known=rng.random(size) >= NULL_PUBLISH_TIME_RATE, topics=topics, categories=categories,
                     entities=entities, pages=pages, landing=order[:ad_documents],
                     entity_key=int(rng.integers(0, 2**62)))


def build_ads(rng: np.random.Generator, count: int, shown: int, documents: Documents) -> Ads:
    """Ads 1..count, `shown` of them shown by displays: ad -> campaign -> advertiser, each landing on
    one of the landing documents."""
    campaigns = max(6, count // ADS_PER_CAMPAIGN)
    advertisers = max(3, campaigns // CAMPAIGNS_PER_ADVERTISER)
    campaign = np.concatenate([[0], covering_assignment(rng, count, campaigns, 1.0)])
    advertiser_of_campaign = np.concatenate([[0], covering_assignment(rng, campaigns, advertisers, 1.0)])
    landing = documents.landing
    document = np.concatenate([[0], landing[covering_assignment(rng, count, landing.size, 0.8) - 1]])
    by_popularity = rng.permutation(count)[:shown] + 1
    theme = documents.theme[document[by_popularity]]
    return Ads(count=count, document=document, campaign=campaign, advertiser=advertiser_of_campaign[campaign],
               by_popularity=by_popularity, campaigns=campaigns, advertisers=advertisers,
               by_theme=by_popularity[np.argsort(theme, kind="stable")],
               theme_start=np.searchsorted(np.sort(theme), np.arange(THEMES + 1)))


def country_group(geo: np.ndarray) -> np.ndarray:
    """The click model's country group of geo_location values (None or NaN: null)."""
    country = np.array([value[:2] if isinstance(value, str) else "" for value in geo])
    return np.where(country == "US", US_GROUP,
                    np.where(np.isin(country, ENGLISH_SPEAKING), ENGLISH_SPEAKING_GROUP, OTHER_COUNTRY_GROUP))


def _region_codes(rng: np.random.Generator, n: int) -> list[str]:
    alphabet = list("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    return ["00"] + ["".join(rng.choice(alphabet, 2)) for _ in range(n - 1)]


def build_locations(rng: np.random.Generator) -> Locations:
    """geo_location values, mostly `US>SS>DMA`; other countries `CC>SS` and some bare `CC`."""
    geo: list[str] = []
    probability: list[float] = []
    state_share = 1.0 / np.arange(1, len(US_STATES) + 1) ** 0.9
    state_share /= state_share.sum()
    dma_codes = iter(rng.permutation(np.arange(500, 882)))
    for state, share in zip(US_STATES, state_share):
        dmas = 1 + rng.binomial(6, 0.4)
        dma_share = rng.dirichlet(np.ones(dmas))
        geo += [f"US>{state}>{next(dma_codes)}" for _ in range(dmas)]
        probability += list(US_SHARE * share * 0.975 * dma_share)
        geo.append(f"US>{state}")
        probability.append(US_SHARE * share * 0.02)
    geo.append("US")
    probability.append(US_SHARE * 0.005)
    country_share = 1.0 / np.arange(1, len(OTHER_COUNTRIES) + 1) ** 1.1
    country_share *= (1 - US_SHARE) / country_share.sum()
    for country, share in zip(OTHER_COUNTRIES, country_share):
        regions = 1 + rng.binomial(5, 0.5)
        region_share = rng.dirichlet(np.ones(regions))
        geo += [f"{country}>{code}" for code in _region_codes(rng, regions)]
        probability += list(share * 0.9 * region_share)
        geo.append(country)
        probability.append(share * 0.1)
    values = np.array(geo)
    p = np.array(probability)
    return Locations(geo=values, probability=p / p.sum(), country_group=country_group(values))


def build_world(clicks: int, seed: int) -> World:
    """The documents, ads and locations of a dataset of `clicks` clicks_train rows."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, SEED_STREAM]))
    ads = max(28, round(clicks / CLICKS_PER_AD))
    shown = max(24, round(clicks / CLICKS_PER_SHOWN_AD))
    documents_count = max(60, round(clicks / CLICKS_PER_META_ROW / (1 - ABSENT_FROM_META)))
    documents = build_documents(rng, documents_count, max(8, ads // ADS_PER_AD_DOCUMENT))
    return World(documents=documents, ads=build_ads(rng, ads, shown, documents), locations=build_locations(rng),
                 users=max(100, USERS_PER_CLICK * clicks), uuid_key=int(rng.integers(0, 2**62)))
