"""Synthetic Criteo-shaped click data with a known ground truth (Bayes-optimal AUC).

Rows: any number of numerical features (Criteo-like log-counts) and of categorical features, each
one-hot or multi-hot (a bag of up to `max_hotness` ids per row, padded with -1), ids drawn from a
Zipf-like law per table (`dlrm.data.synthetic.sampling`), and a label sampled from a hidden click
model (`dlrm.data.synthetic.click_model`) whose true click probability of every row is known. The dataset
metadata records `bayes_auc` / `bayes_logloss` (of the true probabilities against the sampled test
labels) and every generator parameter; `ground_truth.npz` holds the hidden weights.

Feature `cat_<i>` is the i-th table given (cardinalities and hotness in that order); the dataset
lists the one-hot features first, then the multi-hot ones (the id-column order of a batch).
Everything is a deterministic function of (cardinalities, hotness, parameters, seed); rows are
generated in fixed-size blocks, each from its own seed, fully vectorised.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import SplitBinaryWriter, dataset_dir
from dlrm.data.synthetic.click_model import GENERATOR_VERSION, ClickModel, build_click_model
from dlrm.data.synthetic.sampling import GeneratorParams, sample_features
from dlrm.exact_metrics import exact_auc, log_loss_from_logits

BLOCK_ROWS = 1 << 17  # rows per independently seeded block (part of the determinism contract)
GROUND_TRUTH_FILE = "ground_truth.npz"


@dataclass(frozen=True)
class Tables:
    """The categorical features of a synthetic dataset in id-column order (one-hot, then multi-hot)."""

    names: tuple[str, ...]
    cardinalities: tuple[int, ...]
    hotness: tuple[int, ...]

    @classmethod
    def of(cls, cardinalities: Sequence[int], hotness: Optional[Sequence[int]] = None) -> "Tables":
        """Feature `cat_<i>` = table i given; `hotness` None = all one-hot."""
        hot = [1] * len(cardinalities) if hotness is None else [int(h) for h in hotness]
        if len(hot) != len(cardinalities):
            raise ValueError(f"{len(hot)} hotness values for {len(cardinalities)} tables: give one per table")
        if any(h < 1 for h in hot):
            raise ValueError(f"hotness values must be >= 1 (1 = one-hot), got {hot}")
        order = [i for i, h in enumerate(hot) if h == 1] + [i for i, h in enumerate(hot) if h > 1]
        return cls(tuple(f"cat_{i}" for i in order), tuple(int(cardinalities[i]) for i in order),
                   tuple(hot[i] for i in order))

    def spec(self, num_numerical: int) -> FeatureSpec:
        """Split-binary spec of the dataset: `label`, `num_<j>`, the one-hot then the multi-hot features."""
        one_hot = {n: c for n, c, h in zip(self.names, self.cardinalities, self.hotness) if h == 1}
        multi_hot = {n: (c, h) for n, c, h in zip(self.names, self.cardinalities, self.hotness) if h > 1}
        spec = FeatureSpec.split_binary("label", [f"num_{j}" for j in range(num_numerical)], one_hot,
                                        mappings=("train", "test"), multi_hot=multi_hot)
        for mapping, chunks in spec.source_spec.items():  # feature cat_<i>'s file is cat_<i>.bin
            for chunk in chunks:
                if chunk["features"][0] in self.names:
                    chunk["files"] = [f"{mapping}/{chunk['features'][0]}.bin"]
        return spec


# ---------------------------------------------------------------------------------- the dataset
def _write_mapping(out_dir: str, spec: FeatureSpec, mapping: str, mapping_index: int, rows: int, seed: int,
                   model: ClickModel, tables: Tables, log_means: np.ndarray, params: GeneratorParams,
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
            numerical, categorical, rng = sample_features(seq, n, tables.cardinalities, tables.hotness, log_means,
                                                          params)
            z = model.click_logits(numerical, categorical)
            y = rng.random(n) < 1.0 / (1.0 + np.exp(-z))
            writer.write(y, numerical, categorical)
            clicks += int(y.sum())
            if keep_scores:
                logits[start:start + n], labels[start:start + n] = z, y
    return clicks, (logits if keep_scores else None), (labels if keep_scores else None)


def generate_dataset(out_dir: str, cardinalities: Sequence[int], train_rows: int, test_rows: int, seed: int,
                     num_numerical: int = 13, params: Optional[GeneratorParams] = None,
                     preset: Optional[str] = None, hotness: Optional[Sequence[int]] = None) -> FeatureSpec:
    """Write `train` and `test` split-binary mappings plus feature_spec.yaml into `out_dir`.

    `hotness`: ids per row of each table (1 = one-hot; None = all one-hot), in `cardinalities` order.
    """
    params = params or GeneratorParams()
    started = time.time()
    tables = Tables.of(cardinalities, hotness)
    model, log_means = build_click_model(tables.cardinalities, num_numerical, seed, params, tables.hotness)
    spec = tables.spec(num_numerical)
    os.makedirs(out_dir, exist_ok=True)
    train_clicks, _, _ = _write_mapping(out_dir, spec, "train", 0, train_rows, seed, model, tables, log_means,
                                        params, keep_scores=False)
    test_clicks, test_z, test_y = _write_mapping(out_dir, spec, "test", 1, test_rows, seed, model, tables,
                                                 log_means, params, keep_scores=True)
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
                      "tables": list(tables.names), "pairs": [list(p) for p in model.pairs],
                      "bias": float(model.bias), "ground_truth": GROUND_TRUTH_FILE,
                      "seconds": round(time.time() - started, 3)},
    }
    spec.save(out_dir)
    return spec


def is_generated(directory: str, cardinalities: Sequence[int], train_rows: int, test_rows: int, seed: int,
                 hotness: Optional[Sequence[int]] = None) -> bool:
    """True if `directory` holds exactly this dataset from this generator version (safe to reuse)."""
    from dlrm.data.format.errors import SpecError

    try:
        spec = FeatureSpec.load(directory).validate()
        wanted = Tables.of(cardinalities, hotness)
        stored = [spec.feature_spec[name] for name in wanted.names]
        return ([int(f["cardinality"]) for f in stored] == list(wanted.cardinalities)
                and [int(f.get("max_hotness", 1)) for f in stored] == list(wanted.hotness)
                and len(spec.feature_spec) == len(stored) + 1 + len(spec.numerical_names)  # no other features
                and spec.num_rows("train") == train_rows and spec.num_rows("test") == test_rows
                and spec.metadata.get("seed") == seed
                and spec.metadata.get("generator", {}).get("version") == GENERATOR_VERSION)
    except (SpecError, OSError, KeyError, ValueError, TypeError):
        return False


def generate_atomically(directory: str, cardinalities: Sequence[int], train_rows: int, test_rows: int, seed: int,
                        hotness: Optional[Sequence[int]] = None, preset: Optional[str] = None) -> None:
    """`generate_dataset` into a temporary directory renamed over `directory`: a half-written
    dataset is never reused, and an outdated one (never another directory: `dlrm.output_dir`) is replaced
    only once the new one is complete."""
    with dataset_dir(directory, "--synthetic_dir").staged(overwrite=True) as tmp:
        generate_dataset(tmp, cardinalities, train_rows, test_rows, seed, preset=preset, hotness=hotness)
