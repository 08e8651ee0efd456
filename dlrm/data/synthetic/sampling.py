"""Feature sampling of the synthetic generator: Zipf-like ids, bags of ids, Criteo-like numericals.

Ids of a table follow P(rank k) ~ k^-a (id 1 most frequent, id 0 = missing). A multi-hot feature of
hotness H holds a bag per row: empty with probability `empty_bag_rate`, else 1..H ids (uniformly many),
each drawn independently from the table's law (repeats allowed), real ids first, then -1 padding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dlrm.features import COMBINERS, PADDING_ID

BAG_POOLINGS = COMBINERS  # the ground truth pools a bag as the trainer can


@dataclass
class GeneratorParams:
    """Shape of the hidden click model (defaults give Bayes AUC ~0.8 and ~25% positives)."""

    zipf_exponent: float = 1.2  # P(rank k) ~ k^-a over ids 1..cardinality-1
    missing_rate: float = 0.02  # share of id 0 (missing) per one-hot table
    head_ids: int = 24  # ids 1..head_ids of each table carry signal; rarer ids none
    latent_dim: int = 4  # dimension of the hidden id vectors of the pairwise terms
    num_pairs: int = 10  # table pairs with a pairwise term
    first_order_std: float = 1.0  # std of sum_t w_t[id_t] (calibrated)
    pairwise_std: float = 1.0  # std of the pairwise sum (calibrated)
    numerical_std: float = 0.8  # std of x . u (calibrated)
    positive_rate: float = 0.25
    numerical_missing_rate: float = 0.1  # share of numericals that are 0 (missing)
    empty_bag_rate: float = 0.05  # share of multi-hot rows with no id at all
    bag_pooling: str = "mean"  # how a bag's per-id effects combine: mean or sum


def zipf_ids(rng: np.random.Generator, n: int, cardinality: int, exponent: float, missing_rate: float) -> np.ndarray:
    """Ids in [0, cardinality): 0 with prob. `missing_rate`, else 1..cardinality-1 with P(k) ~ k^-a.

    Inverse CDF of the continuous power law on [1, cardinality), floored: O(n), no per-id tables,
    so it works for the 200M-row Criteo tables too.
    """
    if cardinality <= 1:
        return np.zeros(n, dtype=np.int32)
    u = rng.random(n)
    top = float(cardinality)
    if abs(exponent - 1.0) < 1e-9:
        x = np.exp(u * np.log(top))
    else:
        g = 1.0 - exponent
        x = (1.0 + u * (top ** g - 1.0)) ** (1.0 / g)
    ids = np.minimum(x.astype(np.int64), cardinality - 1).astype(np.int32)
    ids[rng.random(n) < missing_rate] = 0
    return ids


def bag_ids(rng: np.random.Generator, n: int, cardinality: int, hotness: int, params: GeneratorParams) -> np.ndarray:
    """[n, hotness] int32 bags: 0..hotness ids per row (Zipf-like, no id-0 'missing'), -1 after them."""
    sizes = rng.integers(1, hotness + 1, size=n)
    sizes[rng.random(n) < params.empty_bag_rate] = 0
    ids = zipf_ids(rng, n * hotness, cardinality, params.zipf_exponent, 0.0).reshape(n, hotness)
    ids[np.arange(hotness)[None, :] >= sizes[:, None]] = PADDING_ID
    return ids


def numerical_log_means(rng: np.random.Generator, num_numerical: int) -> np.ndarray:
    return rng.uniform(0.0, 3.0, size=num_numerical)  # log-mean of each count feature


def sample_numerical(rng: np.random.Generator, n: int, log_means: np.ndarray, missing_rate: float) -> np.ndarray:
    """Criteo-like dense features: log(1 + count), counts log-normal; some missing (0). float16."""
    counts = np.floor(rng.lognormal(mean=log_means, sigma=1.0, size=(n, log_means.size)))
    x = np.log1p(counts)
    x[rng.random((n, log_means.size)) < missing_rate] = 0.0
    return x.astype(np.float16)


Features = tuple[np.ndarray, np.ndarray, np.random.Generator]


def sample_features(seed_seq: np.random.SeedSequence, n: int, cards: Sequence[int], hotness: Sequence[int],
                    log_means: np.ndarray, params: GeneratorParams) -> Features:
    """(numerical [n, F] float16, ids [n, sum(hotness)] int32, the generator to draw labels with).

    Tables in the order given; a table of hotness 1 is one-hot, a larger one a bag of ids.
    """
    rng = np.random.default_rng(seed_seq)
    categorical = np.empty((n, int(sum(hotness))), dtype=np.int32)
    start = 0
    for card, h in zip(cards, hotness):
        if h == 1:
            categorical[:, start] = zipf_ids(rng, n, card, params.zipf_exponent, params.missing_rate)
        else:
            categorical[:, start:start + h] = bag_ids(rng, n, card, h, params)
        start += h
    numerical = sample_numerical(rng, n, log_means, params.numerical_missing_rate)
    return numerical, categorical, rng
