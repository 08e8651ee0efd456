"""Flags (and the PREPROC_* environment defaults) -> OutbrainConfig. `python -m preproc_spark3.outbrain --help`."""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

from dlrm import argtypes
from preproc_spark3.cli import add_spark_arguments, run_job, spark_settings
from preproc_spark3.outbrain.config import OutbrainConfig, parse_ctr_threshold

_DEFAULTS = OutbrainConfig(raw_dir="", out_dir="")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False, prog="python -m preproc_spark3.outbrain",
        description="Kaggle's raw Outbrain click logs -> split-binary Wide & Deep dataset, with Spark 3.")
    p.add_argument("raw_dir", help="directory holding clicks_train, events, promoted_content, documents_meta, "
                                   "documents_topics, documents_entities, documents_categories (.csv or .csv.gz)")
    p.add_argument("out_dir", help="dataset directory to write (feature_spec.yaml, train/, test/)")
    p.add_argument("--seed", type=argtypes.seed, default=_DEFAULTS.seed,
                   help="seed of the per-display train/test draw and of the train rows' order")
    p.add_argument("--ctr_threshold", action="append", default=[], metavar="FEATURE=N",
                   help="minimum train count of a CTR feature's value (repeatable; overrides dlrm.data.outbrain's "
                        "CTR_THRESHOLDS, e.g. ad_id=2)")
    p.add_argument("--max_malformed_fraction", type=argtypes.non_negative_number,
                   default=_DEFAULTS.max_malformed_fraction,
                   help="fail if more than this fraction of all data lines is quarantined (unreadable or bad)")
    p.add_argument("--parquet", action="store_true",
                   help="also write NVIDIA's parquet layout: <out_dir>/parquet/{train,valid}/ (float32 numericals)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the dataset out_dir holds (written aside, renamed into place when complete)")
    p.add_argument("--batch_rows", type=argtypes.positive_int, default=_DEFAULTS.batch_rows,
                   help="rows the driver converts and writes at a time (bounds its memory)")
    add_spark_arguments(p)
    return p


def parse_config(argv: Optional[Sequence[str]] = None) -> OutbrainConfig:
    """Flags -> OutbrainConfig; a typed flag that would change nothing is refused (exit 2)."""
    parser, argv = build_parser(), argtypes.command_line(argv)
    a = parser.parse_args(argv)
    thresholds = dict(_DEFAULTS.ctr_thresholds)
    thresholds.update(parse_ctr_threshold(item) for item in a.ctr_threshold)
    config = OutbrainConfig(raw_dir=a.raw_dir, out_dir=a.out_dir, seed=a.seed, ctr_thresholds=thresholds,
                            max_malformed_fraction=a.max_malformed_fraction, write_parquet=a.parquet,
                            overwrite=a.overwrite, batch_rows=a.batch_rows,
                            spark=spark_settings(parser, argv, a, _DEFAULTS.spark.jvm_options))
    config.validate()
    return config


def main(argv: Optional[Sequence[str]] = None) -> int:
    result = run_job(argv, parse_config, "preproc_spark3.outbrain.job:run")
    if result is None:
        return 2
    summary = result.quarantined.describe() if result.quarantined else "nothing quarantined"
    print(f"dataset written to {result.out_dir}: rows {result.rows}; {summary}")
    return 0
