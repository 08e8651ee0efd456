"""Displays of the raw Outbrain generator: the schedule (ads per display, timestamps), each display's event
(page, user, platform, location) and ads, the clicked ad drawn from the hidden model, and its Bayes AP."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlrm.data.outbrain import MS_PER_DAY
from dlrm.data.synthetic.outbrain_click_model import ClickModel, expected_ap, total_score
from dlrm.data.synthetic.outbrain_world import OTHER_COUNTRY_GROUP, Ads, World, later_duplicates, zipf_ranks
from dlrm.exact_metrics import random_order_ap

MIN_ADS, MAX_ADS = 2, 12
EXTRA_ADS_P = 0.316  # ads per display = 2 + Binomial(10, p): mean 5.16 as in Kaggle's clicks_train
CLICK_DAYS = 13  # displays with clicks fall on days 0..12
EVENT_DAYS = 15  # the events without clicks (Kaggle's test displays) fall on days 0..14,
LATE_EXTRA_SHARE = 0.5  # half of them on days 13 and 14
EXTRA_EVENT_SHARE = 0.37  # events without clicks per display with clicks (Kaggle: 6,245,533 / 16,874,593)
AD_EXPONENT = 1.0
CONTEXTUAL_SHARE = 0.25  # of the ads shown, those chosen among the ads on the page's theme
PAGE_EXPONENT = 1.0
PLATFORM_SHARES = (0.40, 0.46, 0.14)  # desktop, mobile, tablet
NULL_PLATFORM_RATE = 0.002
NULL_GEO_RATE = 0.005
SEED_STREAM = 3  # the schedule is drawn from SeedSequence([seed, SEED_STREAM])


@dataclass
class Schedule:
    """The displays with clicks (ids 1.., in time order) and the events without clicks after them."""

    sizes: np.ndarray  # ads of display i + 1
    timestamps: np.ndarray  # ms after the data's start, ascending
    extra_timestamps: np.ndarray  # of the events without clicks, ascending


@dataclass
class Events:
    """One event per display. 0 in `platform` and -1 in `location` are null."""

    display_id: np.ndarray
    timestamp: np.ndarray
    page: np.ndarray
    user: np.ndarray
    platform: np.ndarray
    location: np.ndarray

    def country_group(self, world: World) -> np.ndarray:
        return np.where(self.location >= 0, world.locations.country_group[self.location], OTHER_COUNTRY_GROUP)


@dataclass
class Displays:
    """A chunk of displays with clicks: their events, ads [n, MAX_ADS] (ascending, 0 after the last), the
    clicked ad's column, the Bayes and random AP@12, and per term the sum of its within-display variance."""

    events: Events
    ads: np.ndarray
    sizes: np.ndarray
    clicked: np.ndarray
    expected_ap: np.ndarray
    random_ap: np.ndarray
    term_variance: dict[str, float]


def display_sizes(rng: np.random.Generator, clicks: int) -> np.ndarray:
    """Ads per display (2..12, mean ~5.16), summing to exactly `clicks` (>= 2)."""
    sizes = MIN_ADS + rng.binomial(MAX_ADS - MIN_ADS, EXTRA_ADS_P, size=int(clicks / 4.5) + 8)
    while sizes.sum() < clicks:
        sizes = np.concatenate([sizes, MIN_ADS + rng.binomial(MAX_ADS - MIN_ADS, EXTRA_ADS_P, size=sizes.size)])
    kept = int(np.searchsorted(np.cumsum(sizes), clicks, side="right"))
    sizes = sizes[:kept]
    rest = clicks - int(sizes.sum())
    if rest >= MIN_ADS:
        sizes = np.append(sizes, rest)
    elif rest == 1:
        below = np.flatnonzero(sizes < MAX_ADS)
        if below.size:
            sizes[below[-1]] += 1
        else:  # every display is full: the last one gives an ad to a new one of two
            sizes[-1] -= 1
            sizes = np.append(sizes, MIN_ADS)
    return sizes


def build_schedule(clicks: int, seed: int) -> Schedule:
    rng = np.random.default_rng(np.random.SeedSequence([seed, SEED_STREAM]))
    sizes = display_sizes(rng, clicks)
    timestamps = np.sort(rng.integers(0, CLICK_DAYS * MS_PER_DAY, size=sizes.size))
    extra = int(round(EXTRA_EVENT_SHARE * sizes.size))
    late = rng.random(extra) < LATE_EXTRA_SHARE
    extra_timestamps = np.sort(np.where(late, rng.integers(CLICK_DAYS * MS_PER_DAY, EVENT_DAYS * MS_PER_DAY, extra),
                                        rng.integers(0, CLICK_DAYS * MS_PER_DAY, extra)))
    return Schedule(sizes=sizes, timestamps=timestamps, extra_timestamps=extra_timestamps)


def sample_events(rng: np.random.Generator, world: World, first_display_id: int, timestamps: np.ndarray) -> Events:
    n = timestamps.size
    pages = world.documents.pages
    platform = rng.choice(np.arange(1, 4), size=n, p=PLATFORM_SHARES)
    platform[rng.random(n) < NULL_PLATFORM_RATE] = 0
    location = rng.choice(world.locations.geo.size, size=n, p=world.locations.probability)
    location[rng.random(n) < NULL_GEO_RATE] = -1
    return Events(display_id=np.arange(first_display_id, first_display_id + n), timestamp=timestamps,
                  page=pages[zipf_ranks(rng, n, pages.size, PAGE_EXPONENT)], user=rng.integers(0, world.users, n),
                  platform=platform, location=location)


def contextual_ads(rng: np.random.Generator, ads: Ads, theme: np.ndarray) -> np.ndarray:
    """An ad landing on a document of each `theme` (ranks P(k) ~ 1 / (k + 1) within it); 0 for a theme
    without ads."""
    start, count = ads.theme_start[theme], np.diff(ads.theme_start)[theme]
    rank = np.exp(rng.random(theme.size) * np.log(count + 1.0)).astype(np.int64) - 1
    return np.where(count > 0, ads.by_theme[np.minimum(start + rank, ads.by_theme.size - 1)], 0)


def sample_ads(rng: np.random.Generator, ads: Ads, sizes: np.ndarray, page_theme: np.ndarray) -> np.ndarray:
    """Distinct ads per display [n, MAX_ADS], ascending, 0 after the last: Zipf-like by popularity, a
    `CONTEXTUAL_SHARE` of them among the ads on the page's theme. Repeats are drawn again (uniformly
    after a few rounds, so that it ends with few ads too)."""
    shown = np.arange(MAX_ADS) < sizes[:, None]
    popular = ads.by_popularity
    drawn = popular[zipf_ranks(rng, shown.size, popular.size, AD_EXPONENT)].reshape(shown.shape)
    context = contextual_ads(rng, ads, np.repeat(page_theme, MAX_ADS)).reshape(shown.shape)
    contextual = (rng.random(shown.shape) < CONTEXTUAL_SHARE) & (context > 0)
    drawn[contextual] = context[contextual]
    for attempt in range(1000):
        repeated = later_duplicates(np.where(shown, drawn, -1 - np.arange(MAX_ADS))) & shown
        if not repeated.any():
            break
        again = int(repeated.sum())
        drawn[repeated] = popular[zipf_ranks(rng, again, popular.size, AD_EXPONENT) if attempt < 20
                                  else rng.integers(0, popular.size, again)]
    else:
        raise RuntimeError("could not draw distinct ads per display")
    return np.sort(np.where(shown, drawn, ads.count + 1), axis=1) % (ads.count + 1)


def term_variance(terms: dict[str, np.ndarray], shown: np.ndarray, sizes: np.ndarray) -> dict[str, float]:
    """Per term (and of the total), the sum over displays of its variance across the display's ads."""
    result = {}
    for name, values in {**terms, "total": np.sum(list(terms.values()), axis=0)}.items():
        masked = np.where(shown, values, 0.0)
        mean = masked.sum(axis=1) / sizes
        result[name] = float(np.sum(np.where(shown, (values - mean[:, None]) ** 2, 0.0).sum(axis=1) / sizes))
    return result


def sample_displays(rng: np.random.Generator, world: World, model: ClickModel, first_display_id: int,
                    sizes: np.ndarray, timestamps: np.ndarray) -> Displays:
    events = sample_events(rng, world, first_display_id, timestamps)
    ads = sample_ads(rng, world.ads, sizes, world.documents.theme[events.page])
    terms = model.terms(events.page, events.timestamp, events.platform, events.country_group(world), ads)
    shown = ads > 0
    score = total_score(terms, ads)
    clicked = np.argmax(score + rng.gumbel(size=score.shape), axis=1)
    return Displays(events=events, ads=ads, sizes=sizes, clicked=clicked, expected_ap=expected_ap(score),
                    random_ap=random_order_ap(sizes), term_variance=term_variance(terms, shown, sizes))
