"""The command line of the synthetic generators (`python -m dlrm.data.synthetic`): a Criteo-shaped
dataset (`generator`) or, for the widedeep presets, the Outbrain-shaped click log (`widedeep_generator`),
written aside and renamed into --out once complete."""
from __future__ import annotations

import argparse
import json
import os
from typing import Optional, Sequence

from dlrm import argtypes
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import dataset_dir
from dlrm.data.synthetic import generator
from dlrm.data.synthetic.criteo import cap_rows, preset_cardinalities, preset_hotness
from dlrm.data.synthetic.generator import generate_dataset
from dlrm.data.synthetic.presets import SYNTHETIC_PRESET_NAMES, is_widedeep_preset

DEFAULT_TRAIN_ROWS, DEFAULT_TEST_ROWS = 1_048_576, 131_072


def build_parser() -> argparse.ArgumentParser:
    parser = argtypes.ArgumentParser(prog="python -m dlrm.data.synthetic", description=generator.__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output dataset directory (new or empty, or see --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the dataset already in --out (only a directory holding a feature_spec.yaml)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=SYNTHETIC_PRESET_NAMES, default="tiny",
                       help="table-size preset (dlrm/data/synthetic/criteo.py; widedeep, widedeep_tiny: the "
                            "Outbrain-shaped Wide & Deep click log of dlrm/data/synthetic/widedeep_generator.py; "
                            "default: tiny)")
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
        from dlrm.data.synthetic.widedeep_generator import generate_widedeep

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
    with dataset_dir(args.out, "--out").staged(args.overwrite) as tmp:
        spec = _generate(args, parser, tmp)
    meta = spec.metadata
    keys = ("num_rows", "bayes_map_at_12", "bayes_auc", "bayes_logloss", "positive_rate")
    print(json.dumps({"out": os.path.abspath(args.out), **{k: meta[k] for k in keys if k in meta},
                      "seconds": meta["generator"]["seconds"]}, indent=1))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(generate_from_flags, argv)
