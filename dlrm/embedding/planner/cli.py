"""`python -m dlrm.embedding.planner`: print a plan for the Criteo presets, given sizes or a feature spec
without any device, and the all-to-all bytes per rank and step on 8 ... 1024 ranks.

The flags that main.py has too carry main.py's names (`--sharding_strategy`, `--rank_memory`,
`--optimizer`, ...), so a placement printed here is the one a training run with the same flags gets.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import List, Optional, Sequence, Tuple

from dlrm.argtypes import ArgumentParser, add_debug_flag, count, feature_pairs, positive_int, sizes_list
from dlrm.cli_flags import FLAGS_BY_NAME, not_applying
from dlrm.config import ARCHS, MODEL_TYPES, ModelConfig, ShardingConfig
from dlrm.data.synthetic.criteo import PRESET_NAMES, preset_cardinalities, preset_hotness  # pure Python
from dlrm.embedding.optimizer_slots import OPTIMIZER_NAMES, slots_for_optimizer
from dlrm.embedding.planner.budget import plan_embeddings
from dlrm.embedding.planner.describe import describe_exchange, describe_plan, describe_scaling, scaling_rows
from dlrm.embedding.planner.exchange_estimate import exchange_bytes
from dlrm.embedding.planner.strategies import STRATEGIES
from dlrm.feature_crosses import cross_problems
from dlrm.features import COMBINERS, FeatureContract, TableConfig, one_hot_tables
from dlrm.model_tables import model_tables
from dlrm.sizes import SIZE_UNITS, byte_size, positive_byte_size


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m dlrm.embedding.planner",
                            description="Print where every embedding table would live and what the exchange costs.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", choices=PRESET_NAMES, help="Criteo preset")
    source.add_argument("--table_rows", type=sizes_list, help="comma-separated table sizes, e.g. 1000,20,300")
    source.add_argument("--feature_spec", metavar="PATH",
                        help="a dataset's feature_spec.yaml (or its directory): its tables, dims and hotness")
    parser.add_argument("--world_size", type=positive_int, help="print the plan for this many ranks")
    parser.add_argument("--global_batch_size", type=positive_int,
                        help="print the all-to-all bytes per rank and step at this global batch, for "
                             "--world_size and for 8, 16, ..., 1024 ranks")
    parser.add_argument("--embedding_dim", type=positive_int, default=None,
                        help="dim of every table that sets none (default: 128)")
    parser.add_argument("--embedding_dims", type=sizes_list, help="one dim per table, e.g. 128,64,16")
    parser.add_argument("--hotness", type=sizes_list, help="ids per row of each table, e.g. 3,2,1 (default: 1)")
    parser.add_argument("--combiner", choices=COMBINERS, default="sum",
                        help="pooling of tables that set none (default: sum)")
    parser.add_argument("--rank_memory", type=positive_byte_size, default=None,
                        help=f"per-rank budget, e.g. 80GiB (default: none); {SIZE_UNITS}")
    parser.add_argument("--sharding_strategy", choices=STRATEGIES, default="memory_balanced",
                        help="(default: memory_balanced)")
    parser.add_argument("--column_slice_threshold", type=positive_byte_size, default=None,
                        help=f"e.g. 4GiB (default: off); {SIZE_UNITS}")
    parser.add_argument("--replicate_threshold", type=byte_size, default=0,
                        help=f"e.g. 1MiB (default: 0 = off); {SIZE_UNITS}")
    parser.add_argument("--bytes_per_element", type=positive_int, default=4, help="(default: 4)")
    slots = parser.add_mutually_exclusive_group()
    slots.add_argument("--optimizer", choices=OPTIMIZER_NAMES, help="count this optimizer's state slots")
    slots.add_argument("--optimizer_slots", type=count, default=0,
                       help="optimizer state copies per weight: SGD 0, Adagrad 1, Adam 2 (default: 0)")
    parser.add_argument("--no_reserve_zero", action="store_true",
                        help="preset sizes without the extra id-0 row per table")
    parser.add_argument("--arch", choices=ARCHS, default="dlrm",
                        help="the model whose tables are planned: widedeep adds one dim-1 `<feature>_wide` table "
                             "per feature for its wide part (default: dlrm)")
    parser.add_argument("--model_type", choices=MODEL_TYPES, default=None,
                        help="with --arch widedeep: the parts the model keeps (default: wide_n_deep)")
    parser.add_argument("--wide_crosses", type=feature_pairs, default=(),
                        help="with --arch widedeep: pairs of one-hot features crossed in the wide part, "
                             "e.g. cat_0:cat_3,cat_1:cat_2 (one table each, as main.py builds them)")
    parser.add_argument("--wide_cross_buckets", type=positive_int, default=None,
                        help="rows of a cross table whose pairs do not fit "
                             f"(default: {ModelConfig().wide_cross_buckets})")
    parser.add_argument("--json", action="store_true", help="print the plan (and estimates) as JSON")
    add_debug_flag(parser)
    return parser


def tables_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[TableConfig, ...]:
    """The tables of the preset, the sizes or the feature spec, with --embedding_dims and --hotness applied."""
    dim = args.embedding_dim or ModelConfig().embedding_dim
    if args.feature_spec:
        from dlrm.data.format.contract import contract_from_spec
        from dlrm.data.format.feature_spec import FeatureSpec

        spec = FeatureSpec.load(args.feature_spec).validate(check_files=False)
        tables = contract_from_spec(spec, dim, args.combiner).tables
    else:
        rows = (preset_cardinalities(args.preset, reserve_zero=not args.no_reserve_zero) if args.preset
                else args.table_rows)
        tables = tuple(replace(t, combiner=args.combiner) for t in one_hot_tables(rows, dim))
        if args.preset:  # a multi-hot preset (mlperf) carries its hotness; the contract lists one-hot tables first
            tables = tuple(replace(t, hotness=h, multi_hot=h > 1)
                           for t, h in zip(tables, preset_hotness(args.preset)))
            tables = tuple(sorted(tables, key=lambda t: t.multi_hot))
    for flag, values in (("--embedding_dims", args.embedding_dims), ("--hotness", args.hotness)):
        if values is not None and len(values) != len(tables):
            parser.error(f"argument {flag}: {len(values)} value(s) given for {len(tables)} tables")
    if args.embedding_dims:
        tables = tuple(replace(t, dim=d) for t, d in zip(tables, args.embedding_dims))
    if args.hotness:
        tables = tuple(replace(t, hotness=h, multi_hot=t.multi_hot or h > 1) for t, h in zip(tables, args.hotness))
    return tables


def _refuse_flags_that_do_not_apply(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A flag typed where it changes nothing is refused, by the trainer's rule and in its words (`cli_flags`)."""
    model_type = args.model_type or ModelConfig().model_type
    for name in ("--model_type", "--wide_crosses", "--wide_cross_buckets"):
        reason = not_applying(FLAGS_BY_NAME[name], args.arch, model_type, "train")
        if getattr(args, name.lstrip("-")) and reason:
            parser.error(f"argument {name}: {reason}")
    if args.wide_cross_buckets and not args.wide_crosses:
        parser.error("argument --wide_cross_buckets: sizes the tables of --wide_crosses, and none are given")
    if args.embedding_dims and args.embedding_dim:
        parser.error("argument --embedding_dim: not used with --embedding_dims (which gives every table's dim)")
    if args.no_reserve_zero and not args.preset:
        parser.error("argument --no_reserve_zero: applies to --preset sizes only (--table_rows and --feature_spec "
                     "give the table sizes as they are)")


def print_plan(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.world_size is None and args.global_batch_size is None:
        parser.error("give --world_size (a plan), --global_batch_size (the scaling table), or both")
    _refuse_flags_that_do_not_apply(parser, args)
    defaults = ModelConfig()
    model = ModelConfig(arch=args.arch, model_type=args.model_type or defaults.model_type,
                        wide_crosses=args.wide_crosses,
                        wide_cross_buckets=args.wide_cross_buckets or defaults.wide_cross_buckets)
    contract = FeatureContract("label", (), tables_from_args(parser, args))
    for problem in cross_problems(args.wide_crosses, contract):
        parser.error(problem)
    tables = model_tables(model, contract)
    sharding = ShardingConfig(
        strategy=args.sharding_strategy,
        rank_memory_bytes=args.rank_memory,
        column_slice_threshold_bytes=args.column_slice_threshold,
        replicate_threshold_bytes=args.replicate_threshold,
        bytes_per_element=args.bytes_per_element)
    slots = slots_for_optimizer(args.optimizer) if args.optimizer else args.optimizer_slots
    plan = None if args.world_size is None else plan_embeddings(tables, args.world_size, sharding, slots)
    batch = args.global_batch_size
    if batch is None:
        assert plan is not None
        print(plan.to_json() if args.json else describe_plan(plan, args.preset))
        return 0
    estimate = None if plan is None else exchange_bytes(plan, batch)
    scaling = scaling_rows(tables, sharding, slots, batch)
    if args.json:
        print(json.dumps({"plan": plan and plan.to_dict(), "exchange": estimate and estimate.summary(),
                          "scaling": [row.to_dict() for row in scaling]}, indent=1))
        return 0
    texts: List[str] = []
    if plan is not None and estimate is not None:
        texts += [describe_plan(plan, args.preset), describe_exchange(estimate), ""]
    print("\n".join(texts + [describe_scaling(scaling, batch)]))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(print_plan, argv)
