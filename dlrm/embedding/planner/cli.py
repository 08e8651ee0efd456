"""`python -m dlrm.embedding.planner`: print a plan for the Criteo presets (or given sizes) without any device.

The flags that main.py has too carry main.py's names (`--sharding_strategy`, `--rank_memory`,
`--optimizer`, ...), so a placement printed here is the one a training run with the same flags gets.
"""
from __future__ import annotations

import argparse
from typing import List, Optional, Sequence

from dlrm.argtypes import ArgumentParser, add_debug_flag, count, positive_int, sizes_list
from dlrm.config import ShardingConfig
from dlrm.data.criteo import PRESET_NAMES, preset_cardinalities  # pure Python
from dlrm.embedding.optimizer_slots import OPTIMIZER_NAMES, slots_for_optimizer
from dlrm.embedding.planner.budget import plan_embeddings
from dlrm.embedding.planner.byte_sizes import byte_size, format_bytes, positive_byte_size
from dlrm.embedding.planner.plan import Plan, TablePlacement
from dlrm.embedding.planner.strategies import STRATEGIES
from dlrm.features import one_hot_tables


def describe_plan(plan: Plan, preset: Optional[str] = None) -> str:
    """Human-readable plan: model size, every table's layout, per-rank memory and its spread."""
    lines = _model_lines(plan, preset)
    lines += [_table_line(t) for t in plan.tables]
    lines += ["", f"{'rank':>4} {'memory':>12} {'lookup load':>12} {'tables':>6}"]
    lines += [f"{r.rank:>4} {format_bytes(r.memory_bytes):>12} {r.lookup_load:>12.1f} {len(r.tables):>6}"
              for r in plan.ranks]
    spread = plan.memory_spread()
    lines.append(
        f"per-rank memory: min {format_bytes(spread['min_bytes'])}, max {format_bytes(spread['max_bytes'])}, "
        f"mean {format_bytes(spread['mean_bytes'])}, max/mean {spread['max_over_mean']:.3f}")
    return "\n".join(lines)


def _model_lines(plan: Plan, preset: Optional[str]) -> List[str]:
    rows_total = sum(t.rows for t in plan.tables)
    weights = rows_total * plan.dim * plan.bytes_per_element
    return [
        f"model{' ' + preset if preset else ''}: {len(plan.tables)} tables, {rows_total:,} rows x "
        f"{plan.dim} = {rows_total * plan.dim / 1e9:.2f}B params, weights {format_bytes(weights)} "
        f"({plan.bytes_per_element} B/element), with {plan.optimizer_slots} optimizer slot(s) "
        f"{format_bytes(weights * (1 + plan.optimizer_slots))}",
        f"world size {plan.world_size}, strategy {plan.strategy}",
        "",
        f"{'table':>5} {'rows':>13} {'kind':<13} pieces (rank: rows x cols)",
    ]


def _table_line(placement: TablePlacement) -> str:
    kind = placement.kind
    if kind == "replicated":
        where = f"all {len(placement.pieces)} ranks"
    elif kind == "table_wise":
        where = ", ".join(f"r{rank}" for rank, _ in placement.pieces)
    elif kind == "row_sliced":
        where = ", ".join(f"r{rank}: [{p.row_start:,}:{p.row_end:,}]" for rank, p in placement.pieces)
    else:
        where = ", ".join(f"r{rank}: cols [{p.col_start}:{p.col_end}]" for rank, p in placement.pieces)
    return f"{placement.table:>5} {placement.rows:>13,} {kind:<13} {where}"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m dlrm.embedding.planner",
                            description="Print where every embedding table would live.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", choices=PRESET_NAMES, help="Criteo preset")
    source.add_argument("--table_rows", type=sizes_list, help="comma-separated table sizes, e.g. 1000,20,300")
    parser.add_argument("--world_size", type=positive_int, required=True)
    parser.add_argument("--embedding_dim", type=positive_int, default=128, help="(default: 128)")
    parser.add_argument("--rank_memory", type=positive_byte_size, default=None,
                        help="per-rank budget, e.g. 80GiB (default: none)")
    parser.add_argument("--sharding_strategy", choices=STRATEGIES, default="memory_balanced",
                        help="(default: memory_balanced)")
    parser.add_argument("--column_slice_threshold", type=positive_byte_size, default=None,
                        help="e.g. 4GiB (default: off)")
    parser.add_argument("--replicate_threshold", type=byte_size, default=0, help="e.g. 1MiB (default: 0 = off)")
    parser.add_argument("--bytes_per_element", type=positive_int, default=4, help="(default: 4)")
    slots = parser.add_mutually_exclusive_group()
    slots.add_argument("--optimizer", choices=OPTIMIZER_NAMES, help="count this optimizer's state slots")
    slots.add_argument("--optimizer_slots", type=count, default=0,
                       help="optimizer state copies per weight: SGD 0, Adagrad 1, Adam 2 (default: 0)")
    parser.add_argument("--no_reserve_zero", action="store_true",
                        help="preset sizes without the extra id-0 row per table")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_debug_flag(parser)
    return parser


def print_plan(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.preset:
        rows = preset_cardinalities(args.preset, reserve_zero=not args.no_reserve_zero)
    else:
        rows = args.table_rows
    sharding = ShardingConfig(
        strategy=args.sharding_strategy,
        rank_memory_bytes=args.rank_memory,
        column_slice_threshold_bytes=args.column_slice_threshold,
        replicate_threshold_bytes=args.replicate_threshold,
        bytes_per_element=args.bytes_per_element)
    slots = slots_for_optimizer(args.optimizer) if args.optimizer else args.optimizer_slots
    plan = plan_embeddings(one_hot_tables(rows, args.embedding_dim), args.world_size, sharding, optimizer_slots=slots)
    print(plan.to_json() if args.json else describe_plan(plan, args.preset))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(print_plan, argv)
