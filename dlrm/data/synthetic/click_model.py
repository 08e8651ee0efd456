"""The hidden click model of the synthetic generator: the ground truth a trained model is scored against.

    logit = bias + sum_t pool_t(w_t) + sum_{(p,q) in pairs} <pool_p(v_p), pool_q(v_q)> + (x - c) . u

`w_t` (per-id effects) and `v_t` (low-dimensional per-id vectors) are non-zero only for the `head_ids`
most frequent ids of each table (and id 0): the signal sits in ids seen often, the tail is noise, as
in real click logs. `pool_t` reads the row's id of a one-hot table, and pools a multi-hot table's bag:
the mean (or sum, `GeneratorParams.bag_pooling`) of its ids' effects, zero for an empty bag. The
pairwise products are what DLRM's dot interaction computes on pooled embeddings, so a DLRM can
represent the model; a logistic regression on ids only gets the first-order part. Each component is
scaled to a target standard deviation measured on a calibration sample, and the bias is set for the
target positive rate. The true click probability of every row is sigmoid(logit), known exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np

from dlrm.atomic import replaced_atomically
from dlrm.data.synthetic.sampling import BAG_POOLINGS, GeneratorParams, numerical_log_means, sample_features

GENERATOR_VERSION = 1
CALIBRATION_ROWS = 1 << 17

Pool = Callable[[np.ndarray], np.ndarray]  # per-id values [K] or [K, d] -> per-row pooled values


@dataclass
class ClickModel:
    """The hidden ground truth; `click_logits` maps stored features to the true logit.

    Tables in the dataset's id-column order; `hotness` empty means every table is one-hot.
    """

    cardinalities: list[int]
    first_order: list[np.ndarray]  # per table: weights of ids 0..head (last entry 0 = any tail id)
    pairs: list[tuple[int, int]]
    vectors: dict[int, np.ndarray] = field(default_factory=dict)  # table -> [head+2, latent_dim]
    numerical_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [num_numerical]
    numerical_center: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [num_numerical]
    bias: float = 0.0
    hotness: list[int] = field(default_factory=list)  # ids per row of each table (empty: all 1)
    bag_pooling: str = "mean"

    @property
    def table_hotness(self) -> list[int]:
        return list(self.hotness) or [1] * len(self.cardinalities)

    def _pool(self, table: int, ids: np.ndarray) -> Pool:
        """How table `table`'s ids [n, hotness] (-1 = padding) select per-id values, row by row."""
        entries = self.first_order[table].shape[0]
        if ids.shape[1] == 1 and (ids.size == 0 or ids.min() >= 0):  # one id per row: a plain lookup
            heads = np.minimum(ids[:, 0], entries - 1)  # tail ids -> the zero entry
            return lambda values: values[heads]
        weights = bag_weights(ids, entries, self.bag_pooling)
        return lambda values: weights @ values

    def components(self, numerical: np.ndarray, categorical: np.ndarray) -> tuple[np.ndarray, ...]:
        """(first-order, pairwise, numerical) logit parts for numerical [n, F], ids [n, sum(hotness)]."""
        n = categorical.shape[0]
        bounds = np.concatenate(([0], np.cumsum(self.table_hotness)))
        pools = [self._pool(t, categorical[:, bounds[t]:bounds[t + 1]]) for t in range(len(self.first_order))]
        first = np.zeros(n)
        for pool, w in zip(pools, self.first_order):
            first += pool(w)
        pooled = {t: pools[t](v) for t, v in self.vectors.items()}
        pairwise = np.zeros(n)
        for p, q in self.pairs:
            pairwise += np.einsum("nd,nd->n", pooled[p], pooled[q])
        dense = (numerical.astype(np.float64) - self.numerical_center) @ self.numerical_weights
        return first, pairwise, dense

    def click_logits(self, numerical: np.ndarray, categorical: np.ndarray) -> np.ndarray:
        first, pairwise, dense = self.components(numerical, categorical)
        return self.bias + first + pairwise + dense

    def save(self, path: str) -> None:
        arrays: dict[str, Any] = {f"first_order_{t}": w for t, w in enumerate(self.first_order)}
        arrays.update({f"vectors_{t}": v for t, v in self.vectors.items()})
        arrays.update(pairs=np.asarray(self.pairs, dtype=np.int64).reshape(-1, 2),
                      cardinalities=np.asarray(self.cardinalities, dtype=np.int64),
                      numerical_weights=self.numerical_weights, numerical_center=self.numerical_center,
                      bias=np.asarray(self.bias))
        if any(h > 1 for h in self.table_hotness):  # a one-hot model's file stays as it always was
            arrays.update(hotness=np.asarray(self.table_hotness, dtype=np.int64),
                          bag_pooling=np.asarray(self.bag_pooling))
        with replaced_atomically(path) as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str) -> "ClickModel":
        with np.load(path, allow_pickle=False) as z:
            cards = [int(c) for c in z["cardinalities"]]
            pairs = [(int(p), int(q)) for p, q in z["pairs"]]
            tables = {t for pair in pairs for t in pair}
            hotness = [int(h) for h in z["hotness"]] if "hotness" in z else []
            pooling = str(z["bag_pooling"]) if "bag_pooling" in z else "mean"
            return cls(cards, [z[f"first_order_{t}"] for t in range(len(cards))], pairs,
                       {t: z[f"vectors_{t}"] for t in sorted(tables)}, z["numerical_weights"],
                       z["numerical_center"], float(z["bias"]), hotness, pooling)


def bag_weights(ids: np.ndarray, entries: int, pooling: str) -> np.ndarray:
    """[n, entries] weight of each per-id entry in each row's pooled value (-1 padding counts nothing).

    Row r's weights are its bag's id counts (tail ids share the last entry), divided by the bag's
    size for mean pooling (an empty bag pools to zero).
    """
    n = ids.shape[0]
    valid = ids >= 0
    cells = np.arange(n, dtype=np.int64)[:, None] * entries + np.minimum(ids, entries - 1)
    weights = np.bincount(cells[valid], minlength=n * entries).reshape(n, entries).astype(np.float64)
    if pooling == "mean":
        weights /= np.maximum(valid.sum(axis=1), 1)[:, None]
    return weights


def _draw_weights(rng: np.random.Generator, cards: Sequence[int], params: GeneratorParams) -> list[np.ndarray]:
    importance = rng.uniform(0.3, 1.0, size=len(cards))  # some tables matter more than others
    first_order = []
    for t, card in enumerate(cards):
        head = min(card - 1, params.head_ids)
        w = np.zeros(head + 2)  # ids 0..head, then the shared zero entry for tail ids
        w[:head + 1] = rng.normal(0.0, importance[t], size=head + 1)
        first_order.append(w)
    return first_order


def _draw_pairs(rng: np.random.Generator, cards: Sequence[int], num_pairs: int) -> list[tuple[int, int]]:
    candidates = [t for t, c in enumerate(cards) if c >= 3]
    all_pairs = [(p, q) for i, p in enumerate(candidates) for q in candidates[i + 1:]]
    chosen: Iterable[int] = (rng.choice(len(all_pairs), size=min(num_pairs, len(all_pairs)), replace=False)
                             if all_pairs else [])
    return sorted(all_pairs[int(i)] for i in chosen)


def _draw_vectors(rng: np.random.Generator, first_order: list[np.ndarray], pairs: list[tuple[int, int]],
                  latent_dim: int) -> dict[int, np.ndarray]:
    vectors = {}
    for t in sorted({t for pair in pairs for t in pair}):
        v = np.zeros((first_order[t].shape[0], latent_dim))
        v[:-1] = rng.normal(0.0, 1.0, size=(v.shape[0] - 1, latent_dim))
        vectors[t] = v
    return vectors


def build_click_model(cardinalities: Sequence[int], num_numerical: int, seed: int, params: GeneratorParams,
                      hotness: Optional[Sequence[int]] = None) -> tuple[ClickModel, np.ndarray]:
    """Draw the hidden weights, calibrate component scales and bias; returns (model, numerical log-means).

    Tables in id-column order; `hotness` (None: all one-hot) gives each table's ids per row.
    """
    if params.bag_pooling not in BAG_POOLINGS:
        raise ValueError(f"bag_pooling must be one of {BAG_POOLINGS}, got {params.bag_pooling!r}")
    cards = [int(c) for c in cardinalities]
    table_hotness = [int(h) for h in hotness] if hotness is not None else [1] * len(cards)
    root = np.random.SeedSequence([seed, GENERATOR_VERSION])
    weights_seq, calibration_seq = root.spawn(2)
    rng = np.random.default_rng(weights_seq)
    log_means = numerical_log_means(rng, num_numerical)
    first_order = _draw_weights(rng, cards, params)
    pairs = _draw_pairs(rng, cards, params.num_pairs)
    vectors = _draw_vectors(rng, first_order, pairs, params.latent_dim)
    numerical_weights = rng.normal(0.0, 1.0, size=num_numerical)
    model = ClickModel(cards, first_order, pairs, vectors, numerical_weights, np.zeros(num_numerical), 0.0,
                       table_hotness if any(h > 1 for h in table_hotness) else [], params.bag_pooling)
    # Calibrate on a sample from the same feature distribution (its own seed).
    numerical, categorical, _ = sample_features(calibration_seq, CALIBRATION_ROWS, cards, table_hotness,
                                                log_means, params)
    _calibrate(model, numerical, categorical, params)
    return model, log_means


def _calibrate(model: ClickModel, numerical: np.ndarray, categorical: np.ndarray, params: GeneratorParams) -> None:
    """Scale each logit component to its target std on the sample, then set the bias for the positive rate."""
    model.numerical_center = numerical.astype(np.float64).mean(axis=0)
    first, pairwise, dense = model.components(numerical, categorical)
    model.first_order = [w * _factor(first, params.first_order_std) for w in model.first_order]
    pair_scale = np.sqrt(_factor(pairwise, params.pairwise_std))  # the product of two pooled vectors
    model.vectors = {t: v * pair_scale for t, v in model.vectors.items()}
    model.numerical_weights = model.numerical_weights * _factor(dense, params.numerical_std)
    model.bias = _bias_for_rate(model.click_logits(numerical, categorical), params.positive_rate)


def _factor(part: np.ndarray, target: float) -> float:
    std = part.std()
    return target / std if std > 0 else 0.0


def _bias_for_rate(logits: np.ndarray, rate: float) -> float:
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < rate:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)
