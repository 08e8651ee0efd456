"""The hidden click model of the Outbrain-shaped (Wide & Deep) synthetic dataset.

A display shows 2..12 ads; exactly one is clicked, ad a with probability softmax over the display's
ads of the hidden score

    s(row) = memorisation(ad_id) + sum over PAIR_FEATURES of P[a, r] + <U(request), V(ad)>
             + w . (x - c) + quadratic(x - c)

- memorisation: one effect per ad, every id its own draw: a model learns it only by seeing the id,
  which a wide (linear) part and the deep part's ad embeddings both do;
- pair memorisation: one effect per pair (a, r) of an ad-side and a request-side id (ids below
  `pair_head_ids` of each; rarer ids have none), every pair its own draw: a wide part with the pair's
  crossed feature learns it like any id weight; an MLP over the two features' embeddings would have to
  fit a random matrix of thousands of entries;
- generalisation: a dot product of low-dimensional hidden vectors, request side (platform, country,
  publisher, source, topics, categories) against ad side (campaign, advertiser, promoted source and
  publisher): an interaction of two features, which a linear model cannot represent;
- numericals: a linear part and a quadratic form (a nonlinear part only the deep MLP can fit).

Request-only terms would cancel in the softmax, so the score has none. Every term is computed from
the stored features (numericals after their float16 rounding), so the ground truth reproduces the
Bayes values from the dataset's files. Each part is scaled to a target standard deviation on a
calibration sample.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from dlrm.atomic import replaced_atomically
from dlrm.feature_crosses import cross_name
from dlrm.features import PADDING_ID

# Memorisation: one effect per ad (many ids, each seen tens of times in the tiny preset). Generalisation:
# low-rank interactions between request attributes and ad attributes of modest cardinality, which
# every display shares with many others, so a model can learn them once and apply them to any ad.
MEMORISATION_FEATURES = ("ad_id",)
# Pair memorisation: (ad-side, request-side) pairs of mid-cardinality one-hot features. The W&D demo crosses
# exactly these in its wide part (`dlrm.cli.WIDEDEEP_DEMO_PRESET`); the metadata records them.
PAIR_FEATURES = (("advertiser_id", "geo_location"), ("campaign_id", "geo_location_state"),
                 ("source_id_promo", "document_id"))
REQUEST_FEATURES = ("platform", "geo_location_country", "topic_id_list", "category_id_list")
AD_FEATURES = ("advertiser_id", "publisher_id_promo")
COMPONENTS = ("memorisation", "pair_memorisation", "generalisation", "numerical_linear", "numerical_nonlinear")


@dataclass
class WideDeepTruth:
    """The hidden score of every row, from stored features laid out as a batch (table order `tables`)."""

    tables: tuple[str, ...]  # categorical features in id-column order
    hotness: tuple[int, ...]
    effects: dict[str, np.ndarray]  # memorisation feature -> effect per id [cardinality]
    pair_effects: dict[str, np.ndarray]  # cross_name(a, r) -> effect per pair of head ids [heads_a, heads_r]
    vectors: dict[str, np.ndarray]  # request / ad feature -> hidden vector per id [cardinality, rank]
    numerical_center: np.ndarray  # [F]
    numerical_linear: np.ndarray  # [F]
    numerical_quadratic: np.ndarray  # [F, F] symmetric
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # generation tables (ad -> campaign, ...)

    def columns(self, categorical: np.ndarray, name: str) -> np.ndarray:
        """Feature `name`'s ids [n, hotness] from a batch's categorical [n, total_hotness]."""
        start = 0
        for table, hot in zip(self.tables, self.hotness):
            if table == name:
                return categorical[:, start:start + hot]
            start += hot
        raise KeyError(name)

    def _pooled(self, categorical: np.ndarray, name: str) -> np.ndarray:
        """Mean of the row's ids' hidden vectors (-1 padding ignored; an empty bag gives zeros)."""
        ids = self.columns(categorical, name)
        valid = ids != PADDING_ID
        table = self.vectors[name]
        total = (table[np.where(valid, ids, 0)] * valid[..., None]).sum(axis=1)
        return total / np.maximum(valid.sum(axis=1), 1)[:, None]

    def components(self, numerical: np.ndarray, categorical: np.ndarray) -> dict[str, np.ndarray]:
        """The score's parts per row (see COMPONENTS), numerical [n, F], ids [n, total_hotness]."""
        memo = sum((self.effects[name][self.columns(categorical, name)[:, 0]] for name in MEMORISATION_FEATURES),
                   np.zeros(categorical.shape[0]))
        pairs = np.zeros(categorical.shape[0])
        for first, second in PAIR_FEATURES:
            table = self.pair_effects[cross_name(first, second)]
            a, r = self.columns(categorical, first)[:, 0], self.columns(categorical, second)[:, 0]
            head = (a < table.shape[0]) & (r < table.shape[1])
            pairs += np.where(head, table[np.where(head, a, 0), np.where(head, r, 0)], 0.0)
        request = sum(self._pooled(categorical, name) for name in REQUEST_FEATURES)
        ad = sum(self._pooled(categorical, name) for name in AD_FEATURES)
        x = numerical.astype(np.float64) - self.numerical_center
        return {"memorisation": memo, "pair_memorisation": pairs, "generalisation": np.einsum("nd,nd->n", request, ad),
                "numerical_linear": x @ self.numerical_linear,
                "numerical_nonlinear": np.einsum("nf,fg,ng->n", x, self.numerical_quadratic, x)}

    def scores(self, numerical: np.ndarray, categorical: np.ndarray, without: Sequence[str] = ()) -> np.ndarray:
        """The hidden score s(row) (optionally without some components: the ablations)."""
        parts = self.components(numerical, categorical)
        return sum((v for k, v in parts.items() if k not in without), np.zeros(categorical.shape[0]))

    def save(self, path: str) -> None:
        arrays: dict[str, Any] = {f"effects/{k}": v for k, v in self.effects.items()}
        arrays.update({f"pairs/{k}": v for k, v in self.pair_effects.items()})
        arrays.update({f"vectors/{k}": v for k, v in self.vectors.items()})
        arrays.update({f"extra/{k}": v for k, v in self.extra.items()})
        arrays.update(tables=np.asarray(self.tables), hotness=np.asarray(self.hotness, dtype=np.int64),
                      numerical_center=self.numerical_center, numerical_linear=self.numerical_linear,
                      numerical_quadratic=self.numerical_quadratic)
        with replaced_atomically(path) as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str) -> "WideDeepTruth":
        with np.load(path, allow_pickle=False) as z:
            def group(prefix: str) -> dict[str, np.ndarray]:
                return {k.split("/", 1)[1]: z[k] for k in z.files if k.startswith(prefix + "/")}

            return cls(tuple(str(t) for t in z["tables"]), tuple(int(h) for h in z["hotness"]), group("effects"),
                       group("pairs"), group("vectors"), z["numerical_center"], z["numerical_linear"],
                       z["numerical_quadratic"], group("extra"))


def scale_to(values: np.ndarray, target: float) -> float:
    """Factor that gives `values` the standard deviation `target` (0 for a constant)."""
    std = float(values.std())
    return target / std if std > 0 else 0.0
