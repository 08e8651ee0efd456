"""Synthetic Criteo-shaped click data with a known ground truth (Bayes-optimal AUC).

Rows: categorical ids drawn from a Zipf-like law per table (id 1 most frequent, id 0 = missing),
13 log-count numerical features, and a label sampled from a hidden click model

    logit = bias + sum_t w_t[id_t] + sum_{(p,q) in pairs} <v_p[id_p], v_q[id_q]> + x . u

where `w_t`, `v_t` (low-dimensional) are non-zero only for the `head_ids` most frequent ids of each
table (and id 0): the signal sits in ids seen often, the tail is noise, as in real click logs. The
pairwise products are exactly what DLRM's dot interaction computes, so a DLRM can represent the
model; a logistic regression on ids only gets the first-order part. Each component is scaled to a
target standard deviation measured on a calibration sample, and the bias is set for the target
positive rate. The dataset metadata records `bayes_auc` (AUC of the true click probabilities against
the sampled test labels) and every generator parameter; `ground_truth.npz` holds the hidden weights.
Everything is a deterministic function of (cardinalities, parameters, seed); rows are generated in
fixed-size blocks, each from its own seed, fully vectorised.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np

from dlrm import argtypes
from dlrm.data.binary import SplitBinaryWriter
from dlrm.data.criteo import PRESET_NAMES, preset_cardinalities
from dlrm.data.feature_spec import FeatureSpec
from dlrm.errors import UserError
from dlrm.metrics import exact_auc, log_loss_from_logits

GENERATOR_VERSION = 1
BLOCK_ROWS = 1 << 17  # rows per independently seeded block (part of the determinism contract)
CALIBRATION_ROWS = 1 << 17
GROUND_TRUTH_FILE = "ground_truth.npz"


@dataclass
class GeneratorParams:
    """Shape of the hidden click model (defaults give Bayes AUC ~0.8 and ~25% positives)."""

    zipf_exponent: float = 1.2  # P(rank k) ~ k^-a over ids 1..cardinality-1
    missing_rate: float = 0.02  # share of id 0 (missing) per table
    head_ids: int = 24  # ids 1..head_ids of each table carry signal; rarer ids none
    latent_dim: int = 4  # dimension of the hidden id vectors of the pairwise terms
    num_pairs: int = 10  # table pairs with a pairwise term
    first_order_std: float = 1.0  # std of sum_t w_t[id_t] (calibrated)
    pairwise_std: float = 1.0  # std of the pairwise sum (calibrated)
    numerical_std: float = 0.8  # std of x . u (calibrated)
    positive_rate: float = 0.25
    numerical_missing_rate: float = 0.1  # share of numericals that are 0 (missing)


@dataclass
class ClickModel:
    """The hidden ground truth; `click_logits` maps stored features to the true logit."""

    cardinalities: list[int]
    first_order: list[np.ndarray]  # per table: weights of ids 0..head (last entry 0 = any tail id)
    pairs: list[tuple[int, int]]
    vectors: dict[int, np.ndarray] = field(default_factory=dict)  # table -> [head+2, latent_dim]
    numerical_weights: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [num_numerical]
    numerical_center: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [num_numerical]
    bias: float = 0.0

    def _head_index(self, table: int, ids: np.ndarray) -> np.ndarray:
        return np.minimum(ids, self.first_order[table].shape[0] - 1)  # tail ids -> the zero entry

    def components(self, numerical: np.ndarray, categorical: np.ndarray) -> tuple[np.ndarray, ...]:
        """(first-order, pairwise, numerical) logit parts for float32 numerical [n,F], ids [n,T]."""
        n = categorical.shape[0]
        first = np.zeros(n)
        heads = [self._head_index(t, categorical[:, t]) for t in range(categorical.shape[1])]
        for t, w in enumerate(self.first_order):
            first += w[heads[t]]
        pairwise = np.zeros(n)
        for p, q in self.pairs:
            pairwise += np.einsum("nd,nd->n", self.vectors[p][heads[p]], self.vectors[q][heads[q]])
        dense = (numerical.astype(np.float64) - self.numerical_center) @ self.numerical_weights
        return first, pairwise, dense

    def click_logits(self, numerical: np.ndarray, categorical: np.ndarray) -> np.ndarray:
        first, pairwise, dense = self.components(numerical, categorical)
        return self.bias + first + pairwise + dense

    def save(self, path: str) -> None:
        arrays = {f"first_order_{t}": w for t, w in enumerate(self.first_order)}
        arrays.update({f"vectors_{t}": v for t, v in self.vectors.items()})
        arrays.update(pairs=np.asarray(self.pairs, dtype=np.int64).reshape(-1, 2),
                      cardinalities=np.asarray(self.cardinalities, dtype=np.int64),
                      numerical_weights=self.numerical_weights, numerical_center=self.numerical_center,
                      bias=np.asarray(self.bias))
        tmp = f"{path}.tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "ClickModel":
        with np.load(path, allow_pickle=False) as z:
            cards = [int(c) for c in z["cardinalities"]]
            pairs = [(int(p), int(q)) for p, q in z["pairs"]]
            tables = {t for pair in pairs for t in pair}
            return cls(cards, [z[f"first_order_{t}"] for t in range(len(cards))], pairs,
                       {t: z[f"vectors_{t}"] for t in sorted(tables)}, z["numerical_weights"],
                       z["numerical_center"], float(z["bias"]))


# ---------------------------------------------------------------------------------- sampling
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


def _numerical_scales(rng: np.random.Generator, num_numerical: int) -> np.ndarray:
    return rng.uniform(0.0, 3.0, size=num_numerical)  # log-mean of each count feature


def sample_numerical(rng: np.random.Generator, n: int, log_means: np.ndarray, missing_rate: float) -> np.ndarray:
    """Criteo-like dense features: log(1 + count), counts log-normal; some missing (0). float16."""
    counts = np.floor(rng.lognormal(mean=log_means, sigma=1.0, size=(n, log_means.size)))
    x = np.log1p(counts)
    x[rng.random((n, log_means.size)) < missing_rate] = 0.0
    return x.astype(np.float16)


def _sample_features(seed_seq: np.random.SeedSequence, n: int, cards: Sequence[int], log_means: np.ndarray,
                     params: GeneratorParams) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    rng = np.random.default_rng(seed_seq)
    categorical = np.empty((n, len(cards)), dtype=np.int32)
    for t, card in enumerate(cards):
        categorical[:, t] = zipf_ids(rng, n, card, params.zipf_exponent, params.missing_rate)
    numerical = sample_numerical(rng, n, log_means, params.numerical_missing_rate)
    return numerical, categorical, rng


# ---------------------------------------------------------------------------------- the model
def build_click_model(cardinalities: Sequence[int], num_numerical: int, seed: int,
                      params: GeneratorParams) -> tuple[ClickModel, np.ndarray]:
    """Draw the hidden weights, calibrate component scales and bias; returns (model, numerical log-means)."""
    root = np.random.SeedSequence([seed, GENERATOR_VERSION])
    weights_seq, calibration_seq = root.spawn(2)
    rng = np.random.default_rng(weights_seq)
    cards = [int(c) for c in cardinalities]
    log_means = _numerical_scales(rng, num_numerical)
    importance = rng.uniform(0.3, 1.0, size=len(cards))  # some tables matter more than others
    first_order = []
    for t, card in enumerate(cards):
        head = min(card - 1, params.head_ids)
        w = np.zeros(head + 2)  # ids 0..head, then the shared zero entry for tail ids
        w[:head + 1] = rng.normal(0.0, importance[t], size=head + 1)
        first_order.append(w)
    candidates = [t for t, c in enumerate(cards) if c >= 3]
    all_pairs = [(p, q) for i, p in enumerate(candidates) for q in candidates[i + 1:]]
    chosen: Iterable[int] = (rng.choice(len(all_pairs), size=min(params.num_pairs, len(all_pairs)), replace=False)
                             if all_pairs else [])
    pairs = sorted(all_pairs[int(i)] for i in chosen)
    vectors = {}
    for t in sorted({t for pair in pairs for t in pair}):
        v = np.zeros((first_order[t].shape[0], params.latent_dim))
        v[:-1] = rng.normal(0.0, 1.0, size=(v.shape[0] - 1, params.latent_dim))
        vectors[t] = v
    numerical_weights = rng.normal(0.0, 1.0, size=num_numerical)
    model = ClickModel(cards, first_order, pairs, vectors, numerical_weights, np.zeros(num_numerical), 0.0)

    # Calibrate on a sample from the same feature distribution (its own seed).
    numerical, categorical, _ = _sample_features(calibration_seq, CALIBRATION_ROWS, cards, log_means, params)
    model.numerical_center = numerical.astype(np.float64).mean(axis=0)
    first, pairwise, dense = model.components(numerical, categorical)
    for part, target, scale in ((first, params.first_order_std, "first"), (pairwise, params.pairwise_std, "pair"),
                                (dense, params.numerical_std, "dense")):
        std = part.std()
        factor = target / std if std > 0 else 0.0
        if scale == "first":
            model.first_order = [w * factor for w in model.first_order]
        elif scale == "pair":
            model.vectors = {t: v * np.sqrt(factor) for t, v in model.vectors.items()}
        else:
            model.numerical_weights = model.numerical_weights * factor
    logits = model.click_logits(numerical, categorical)
    model.bias = _bias_for_rate(logits, params.positive_rate)
    return model, log_means


def _bias_for_rate(logits: np.ndarray, rate: float) -> float:
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < rate:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------------------------- the dataset
def _write_mapping(out_dir: str, spec: FeatureSpec, mapping: str, mapping_index: int, rows: int, seed: int,
                   model: ClickModel, log_means: np.ndarray, params: GeneratorParams,
                   keep_scores: bool) -> tuple[int, Optional[np.ndarray], Optional[np.ndarray]]:
    """Generate and write `rows` rows; returns the number of clicks and, with `keep_scores`, the true
    click logits and labels of every row (memory per row: only the test mapping needs them)."""
    logits = np.empty(rows if keep_scores else 0, dtype=np.float64)
    labels = np.empty(rows if keep_scores else 0, dtype=bool)
    clicks = 0
    with SplitBinaryWriter(out_dir, spec, mapping) as writer:
        for block, start in enumerate(range(0, rows, BLOCK_ROWS)):
            n = min(BLOCK_ROWS, rows - start)
            seq = np.random.SeedSequence([seed, GENERATOR_VERSION, 1 + mapping_index, block])
            numerical, categorical, rng = _sample_features(seq, n, model.cardinalities, log_means, params)
            z = model.click_logits(numerical, categorical)
            y = rng.random(n) < 1.0 / (1.0 + np.exp(-z))
            writer.write(y, numerical, categorical)
            clicks += int(y.sum())
            if keep_scores:
                logits[start:start + n], labels[start:start + n] = z, y
    return clicks, (logits if keep_scores else None), (labels if keep_scores else None)


def generate_dataset(out_dir: str, cardinalities: Sequence[int], train_rows: int, test_rows: int, seed: int,
                     num_numerical: int = 13, params: Optional[GeneratorParams] = None,
                     preset: Optional[str] = None) -> FeatureSpec:
    """Write `train` and `test` split-binary mappings plus feature_spec.yaml into `out_dir`."""
    params = params or GeneratorParams()
    started = time.time()
    model, log_means = build_click_model(cardinalities, num_numerical, seed, params)
    spec = FeatureSpec.criteo_like(model.cardinalities, num_numerical, mappings=("train", "test"))
    os.makedirs(out_dir, exist_ok=True)
    train_clicks, _, _ = _write_mapping(out_dir, spec, "train", 0, train_rows, seed, model, log_means, params,
                                        keep_scores=False)
    test_clicks, test_z, test_y = _write_mapping(out_dir, spec, "test", 1, test_rows, seed, model, log_means,
                                                 params, keep_scores=True)
    model.save(os.path.join(out_dir, GROUND_TRUTH_FILE))
    spec.metadata = {
        "num_rows": {"train": int(train_rows), "test": int(test_rows)},
        "seed": int(seed),
        "bayes_auc": exact_auc(test_y, test_z) if test_rows else None,
        "bayes_logloss": log_loss_from_logits(test_y, test_z) if test_rows else None,
        "positive_rate": {"train": train_clicks / train_rows if train_rows else None,
                          "test": test_clicks / test_rows if test_rows else None},
        "generator": {"name": "dlrm.data.synthetic", "version": GENERATOR_VERSION, "seed": int(seed),
                      "preset": preset, "block_rows": BLOCK_ROWS, "params": asdict(params),
                      "pairs": [list(p) for p in model.pairs], "bias": float(model.bias),
                      "ground_truth": GROUND_TRUTH_FILE, "seconds": round(time.time() - started, 3)},
    }
    spec.save(out_dir)
    return spec


def is_generated(directory: str, cardinalities: Sequence[int], train_rows: int, test_rows: int, seed: int) -> bool:
    """True if `directory` holds exactly this dataset from this generator version (safe to reuse)."""
    from dlrm.data.errors import SpecError

    try:
        spec = FeatureSpec.load(directory).validate()
        return (spec.cardinalities == list(cardinalities)
                and spec.num_rows("train") == train_rows and spec.num_rows("test") == test_rows
                and spec.metadata.get("seed") == seed
                and spec.metadata.get("generator", {}).get("version") == GENERATOR_VERSION)
    except (SpecError, OSError, KeyError, ValueError):
        return False


def generate_atomically(directory: str, cardinalities: Sequence[int], train_rows: int, test_rows: int, seed: int,
                        preset: Optional[str] = None) -> None:
    """`generate_dataset` into a temporary directory renamed over `directory`: a half-written
    dataset is never reused, and an outdated one is replaced only once the new one is complete."""
    tmp = f"{directory}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    generate_dataset(tmp, cardinalities, train_rows, test_rows, seed, preset=preset)
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.rename(tmp, directory)


def build_parser() -> argparse.ArgumentParser:
    parser = argtypes.ArgumentParser(prog="python -m dlrm.data.synthetic", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output dataset directory (new or empty, or see --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the dataset already in --out (only a directory holding a feature_spec.yaml)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=PRESET_NAMES, default="tiny",
                       help="table-size preset (dlrm/data/criteo.py; default: tiny)")
    group.add_argument("--cardinalities", type=argtypes.sizes_list,
                       help="comma-separated table sizes (id 0 included), instead of a preset, e.g. 1000,20,300")
    parser.add_argument("--train_rows", type=argtypes.positive_int, default=1_048_576, help="(default: 1048576)")
    parser.add_argument("--test_rows", type=argtypes.count, default=131_072, help="(default: 131072)")
    parser.add_argument("--seed", type=argtypes.seed, default=12345, help="(default: 12345)")
    parser.add_argument("--num_numerical", type=argtypes.count, default=13, help="numerical features (default: 13)")
    argtypes.add_debug_flag(parser)
    return parser


class OutputExists(UserError):
    """The generator would write over something already in --out."""

    on_every_rank = True


def check_output_dir(out: str, overwrite: bool) -> None:
    """Refuse to write into a non-empty --out unless it holds a dataset and --overwrite says to replace it."""
    if not os.path.isdir(out) or not os.listdir(out):
        if os.path.exists(out) and not os.path.isdir(out):
            raise OutputExists(f"--out {out} exists and is not a directory")
        return
    if not os.path.exists(os.path.join(out, "feature_spec.yaml")):
        raise OutputExists(f"--out {out} is a non-empty directory that holds no dataset (no feature_spec.yaml): "
                           f"choose a new or empty directory")
    if not overwrite:
        raise OutputExists(f"--out {out} already holds a dataset: pass --overwrite to replace it, "
                           f"or choose another directory")


def generate_from_flags(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    check_output_dir(args.out, args.overwrite)
    if args.cardinalities:
        cards, preset = args.cardinalities, None
    else:
        cards, preset = preset_cardinalities(args.preset), args.preset
    # Written aside and renamed when complete: an interrupted run leaves --out as it was.
    tmp = f"{os.path.normpath(args.out)}.tmp-{os.getpid()}"
    try:
        spec = generate_dataset(tmp, cards, args.train_rows, args.test_rows, args.seed, args.num_numerical,
                                preset=preset)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)  # empty, or a dataset that --overwrite replaces (check_output_dir)
    os.rename(tmp, args.out)
    meta = spec.metadata
    print(json.dumps({"out": os.path.abspath(args.out), "bayes_auc": meta["bayes_auc"],
                      "bayes_logloss": meta["bayes_logloss"], "positive_rate": meta["positive_rate"],
                      "seconds": meta["generator"]["seconds"]}, indent=1))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(generate_from_flags, argv)


if __name__ == "__main__":
    sys.exit(main())
