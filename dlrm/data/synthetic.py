"""Synthetic Criteo-shaped click data with a known ground truth (Bayes-optimal AUC).

Rows: any number of numerical features (Criteo-like log-counts) and of categorical features, each
one-hot or multi-hot (a bag of up to `max_hotness` ids per row, padded with -1), ids drawn from a
Zipf-like law per table (`dlrm.data.synthetic_sampling`), and a label sampled from a hidden click
model (`dlrm.data.synthetic_model`) whose true click probability of every row is known. The dataset
metadata records `bayes_auc` / `bayes_logloss` (of the true probabilities against the sampled test
labels) and every generator parameter; `ground_truth.npz` holds the hidden weights.

Feature `cat_<i>` is the i-th table given (cardinalities and hotness in that order); the dataset
lists the one-hot features first, then the multi-hot ones (the id-column order of a batch).
Everything is a deterministic function of (cardinalities, hotness, parameters, seed); rows are
generated in fixed-size blocks, each from its own seed, fully vectorised.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

from dlrm import argtypes
from dlrm.data.binary import SplitBinaryWriter
from dlrm.data.criteo import cap_rows, preset_cardinalities, preset_hotness
from dlrm.data.feature_spec import FeatureSpec
from dlrm.data.presets import SYNTHETIC_PRESET_NAMES, is_widedeep_preset
from dlrm.data.synthetic_model import GENERATOR_VERSION, ClickModel, build_click_model
from dlrm.data.synthetic_sampling import GeneratorParams, sample_features, zipf_ids
from dlrm.errors import UserError
from dlrm.exact_metrics import exact_auc, log_loss_from_logits

__all__ = ["GENERATOR_VERSION", "GROUND_TRUTH_FILE", "ClickModel", "GeneratorParams", "generate_dataset",
           "generate_atomically", "is_generated", "zipf_ids"]

DEFAULT_TRAIN_ROWS, DEFAULT_TEST_ROWS = 1_048_576, 131_072
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
    from dlrm.data.errors import SpecError

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
    dataset is never reused, and an outdated one is replaced only once the new one is complete."""
    tmp = f"{directory}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    generate_dataset(tmp, cardinalities, train_rows, test_rows, seed, preset=preset, hotness=hotness)
    if os.path.exists(directory):
        shutil.rmtree(directory)
    os.rename(tmp, directory)


def build_parser() -> argparse.ArgumentParser:
    parser = argtypes.ArgumentParser(prog="python -m dlrm.data.synthetic", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output dataset directory (new or empty, or see --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the dataset already in --out (only a directory holding a feature_spec.yaml)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=SYNTHETIC_PRESET_NAMES, default="tiny",
                       help="table-size preset (dlrm/data/criteo.py; widedeep, widedeep_tiny: the Outbrain-shaped "
                            "Wide & Deep click log of dlrm/data/synthetic_widedeep.py; default: tiny)")
    group.add_argument("--cardinalities", type=argtypes.sizes_list,
                       help="comma-separated table sizes (id 0 included), instead of a preset, e.g. 1000,20,300")
    parser.add_argument("--train_rows", type=argtypes.positive_int,
                        help=f"(default: {DEFAULT_TRAIN_ROWS}; widedeep presets: train + test rows are the rows of "
                             f"the click log, split by day and display; default: the preset's)")
    parser.add_argument("--test_rows", type=argtypes.count, help=f"(default: {DEFAULT_TEST_ROWS})")
    parser.add_argument("--seed", type=argtypes.seed, default=12345, help="(default: 12345)")
    parser.add_argument("--num_numerical", type=argtypes.count, help="numerical features (default: 13)")
    parser.add_argument("--hotness", type=argtypes.sizes_list,
                        help="comma-separated ids per row, one per table (1 = one-hot, H = multi-hot bags of "
                             "0..H ids); default: the preset's (mlperf presets: MLPerf DLRM-DCNv2's), else all one-hot")
    parser.add_argument("--max_rows", type=argtypes.positive_int,
                        help="cap every table at this many rows (e.g. a small version of a preset's huge tables)")
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


def _tables_from_flags(args: argparse.Namespace,
                       parser: argparse.ArgumentParser) -> tuple[list[int], list[int], Optional[str]]:
    """(cardinalities, hotness, preset or None) from --preset / --cardinalities, --hotness, --max_rows."""
    if args.cardinalities:
        cards, hotness, preset = list(args.cardinalities), [1] * len(args.cardinalities), None
    else:
        cards, hotness, preset = preset_cardinalities(args.preset), preset_hotness(args.preset), args.preset
    if args.hotness is not None:
        if len(args.hotness) != len(cards):
            source = "--cardinalities" if args.cardinalities else f"--preset {args.preset}"
            parser.error(f"argument --hotness: expected one value per table: {source} has {len(cards)} tables, "
                         f"got {len(args.hotness)} values")
        hotness = list(args.hotness)
    return cap_rows(cards, args.max_rows), hotness, preset


def _widedeep_rows(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Optional[int]:
    """Rows of a widedeep preset's click log (train + test rows; None: the preset's default), after
    refusing the flags that shape Criteo-like tables only."""
    for flag in ("hotness", "num_numerical"):
        if getattr(args, flag) is not None:
            parser.error(f"argument --{flag}: not used by --preset {args.preset} (the reference's 16 tables and "
                         f"13 numerical features)")
    if args.train_rows is None and args.test_rows is None:
        return None
    return (args.train_rows or 0) + (args.test_rows or 0)


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser, out: str) -> FeatureSpec:
    if is_widedeep_preset(args.preset) and not args.cardinalities:
        from dlrm.data.synthetic_widedeep import generate_widedeep

        return generate_widedeep(out, args.preset, _widedeep_rows(args, parser), args.seed, max_rows=args.max_rows)
    cards, hotness, preset = _tables_from_flags(args, parser)
    train_rows = DEFAULT_TRAIN_ROWS if args.train_rows is None else args.train_rows
    test_rows = DEFAULT_TEST_ROWS if args.test_rows is None else args.test_rows
    num_numerical = 13 if args.num_numerical is None else args.num_numerical
    return generate_dataset(out, cards, train_rows, test_rows, args.seed, num_numerical, preset=preset,
                            hotness=hotness)


def generate_from_flags(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_output_dir(args.out, args.overwrite)
    # Written aside and renamed when complete: an interrupted run leaves --out as it was.
    tmp = f"{os.path.normpath(args.out)}.tmp-{os.getpid()}"
    try:
        spec = _generate(args, parser, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)  # empty, or a dataset that --overwrite replaces (check_output_dir)
    os.rename(tmp, args.out)
    meta = spec.metadata
    keys = ("num_rows", "bayes_map_at_12", "bayes_auc", "bayes_logloss", "positive_rate")
    print(json.dumps({"out": os.path.abspath(args.out), **{k: meta[k] for k in keys if k in meta},
                      "seconds": meta["generator"]["seconds"]}, indent=1))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(generate_from_flags, argv)


if __name__ == "__main__":
    sys.exit(main())
