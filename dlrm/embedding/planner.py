"""Where every embedding table lives: a pure-Python placement planner (no TensorFlow).

Given table sizes, the embedding width, the world size and a `ShardingConfig`, `plan_embeddings`
decides for each table one of four layouts and the rank of every piece:

- ``replicated``    small tables (bytes <= replicate threshold): a full copy on every rank, looked up
                    locally, trained data-parallel (gradients allreduced);
- ``row_sliced``    tables bigger than one rank's memory budget: contiguous row ranges on distinct
                    ranks; each id is sent to the owner of its row range;
- ``column_sliced`` tables above the column-slice threshold: column ranges on distinct ranks; each id
                    is sent to every slice owner and the vectors are re-assembled;
- ``table_wise``    everything else: the whole table on one rank.

Memory counts the weights plus optimizer slots (`optimizer_slots` extra copies: SGD 0, Adagrad 1,
Adam 2). Lookup load counts embedding elements fetched per global sample (hotness x columns, and for
row slices the share of rows, assuming ids spread uniformly — real Criteo ids are numbered by
descending frequency, so the first row range is hotter than this estimate).

Strategies:
- ``basic``: pieces dealt round-robin over ranks in table order, ignoring sizes (NVIDIA's "basic").
- ``memory_balanced`` (default): largest piece first, each onto the rank with the lowest combined
  share of total memory plus share of total lookups. Largest-first keeps the peak per-rank memory
  (what decides whether a model fits) near the mean; the lookup term then spreads the many tiny
  tables so that no rank receives most of the all-to-all traffic. `basic` can overflow a rank (or
  leave it idle) whenever table sizes differ by orders of magnitude, as Criteo's do.

The CLI prints a plan for the Criteo presets without any device:
``python -m dlrm.embedding.planner --preset t0 --world_size 8 --rank_memory 80GiB``.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from typing import List, Optional, Sequence

from dlrm.argtypes import ArgumentParser, add_debug_flag, count, positive_int, sizes_list
from dlrm.config import ShardingConfig
from dlrm.data.criteo import PRESET_NAMES, preset_cardinalities  # pure Python
from dlrm.errors import UserError

STRATEGIES = ("basic", "memory_balanced")
OPTIMIZER_SLOTS = {"sgd": 0, "adagrad": 1, "adam": 2}
GiB = 1024**3


class PlanError(UserError, ValueError):
    """The tables cannot be placed on this cluster (the message names the table and the shortfall).

    Every rank plans alike, so rank 0 alone reports it. `minimum_rank_memory`: the smallest per-rank
    budget at which the plan succeeds (None when not known).
    """

    on_every_rank = True

    def __init__(self, message: str, table: Optional[int] = None):
        super().__init__(message)
        self.table = table
        self.minimum_rank_memory: Optional[int] = None


@dataclass(frozen=True)
class Piece:
    """Rows [row_start, row_end) x columns [col_start, col_end) of a table, held by `rank`."""

    rank: int
    row_start: int
    row_end: int
    col_start: int
    col_end: int

    @property
    def rows(self) -> int:
        return self.row_end - self.row_start

    @property
    def cols(self) -> int:
        return self.col_end - self.col_start


@dataclass
class TablePlacement:
    table: int
    rows: int
    kind: str
    pieces: List[Piece]
    lookups_per_sample: float = 1.0


@dataclass
class RankLoad:
    rank: int
    memory_bytes: int = 0
    lookup_load: float = 0.0  # embedding elements gathered per global sample
    tables: List[int] = field(default_factory=list)


@dataclass
class Plan:
    world_size: int
    dim: int
    strategy: str
    bytes_per_element: int
    optimizer_slots: int
    tables: List[TablePlacement]
    ranks: List[RankLoad]

    # -- queries used by the distributed layer and checkpoints ---------------------------------
    def pieces_on_rank(self, rank: int) -> List[tuple]:
        """[(table, piece)] held by `rank`, in table order (replicated tables included)."""
        return [(t.table, p) for t in self.tables for p in t.pieces if p.rank == rank]

    @property
    def total_memory_bytes(self) -> int:
        return sum(r.memory_bytes for r in self.ranks)

    def memory_spread(self) -> dict:
        mem = [r.memory_bytes for r in self.ranks]
        mean = sum(mem) / len(mem)
        return {"min_bytes": min(mem), "max_bytes": max(mem), "mean_bytes": mean,
                "max_over_mean": (max(mem) / mean) if mean else 1.0}

    # -- JSON round trip (checkpoints store the plan in meta.json) -----------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, data: dict) -> "Plan":
        tables = [TablePlacement(table=t["table"], rows=t["rows"], kind=t["kind"],
                                 pieces=[Piece(**p) for p in t["pieces"]],
                                 lookups_per_sample=t.get("lookups_per_sample", 1.0))
                  for t in data["tables"]]
        ranks = [RankLoad(**r) for r in data["ranks"]]
        return cls(world_size=data["world_size"], dim=data["dim"], strategy=data["strategy"],
                   bytes_per_element=data["bytes_per_element"],
                   optimizer_slots=data["optimizer_slots"], tables=tables, ranks=ranks)


def slots_for_optimizer(name: str) -> int:
    """Optimizer state copies per embedding weight (memory multiplier minus one)."""
    try:
        return OPTIMIZER_SLOTS[name]
    except KeyError:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {tuple(OPTIMIZER_SLOTS)}") from None


def parse_bytes(text: str) -> int:
    """'80GiB', '1.5TiB', '500MB', '1e9' -> bytes (binary units for *iB, decimal for *B; any case)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+]?[0-9]+)?)\s*([KMGT]i?B?|B)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise ValueError(f"invalid size {text!r}: expected a memory size, a number with an optional unit "
                         f"(80GiB, 512MiB, 2TB, 1e9)")
    number, unit = float(match.group(1)), (match.group(2) or "B").upper()
    if not math.isfinite(number):
        raise ValueError(f"invalid size {text!r}: not a finite number")
    if unit == "B":
        scale = 1
    else:
        power = "KMGT".index(unit[0]) + 1
        scale = (1024 if "I" in unit else 1000) ** power
    return int(number * scale)


def byte_size(text: str) -> int:
    """`parse_bytes` as an argparse type: a bad size is a usage error, not a traceback."""
    try:
        return parse_bytes(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def positive_byte_size(text: str) -> int:
    """`byte_size` that refuses 0 (a budget or threshold of nothing)."""
    value = byte_size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a memory size above 0, got {text!r}")
    return value


def format_bytes(n: float, round_up: bool = False) -> str:
    """'17.45 GiB'; `round_up`: never below `n` (a minimum a user can type back and be sure to meet)."""
    for unit, scale in (("TiB", 1024**4), ("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            value = math.ceil(n / scale * 100) / 100 if round_up else n / scale
            return f"{value:.2f} {unit}"
    return f"{math.ceil(n) if round_up else int(n)} B"


def _even_ranges(total: int, parts: int) -> List[tuple]:
    """Split [0, total) into `parts` contiguous ranges whose lengths differ by at most one."""
    base, extra = divmod(total, parts)
    ranges, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        ranges.append((start, end))
        start = end
    return ranges


def _table_kind(table_bytes: int, world_size: int, cfg: ShardingConfig, budget: Optional[int]) -> str:
    if world_size == 1:
        return "table_wise"
    if budget is not None and table_bytes > budget:
        return "row_sliced"
    if cfg.column_slice_threshold_bytes is not None and table_bytes > cfg.column_slice_threshold_bytes:
        return "column_sliced"
    if table_bytes <= cfg.replicate_threshold_bytes:
        return "replicated"
    return "table_wise"


def _check_row_slicable(table: int, rows: int, dim: int, table_bytes: int, world_size: int,
                        budget: int) -> int:
    """Fewest row slices that fit the budget; an error naming the table when the world is too small."""
    needed = math.ceil(table_bytes / budget)
    if needed > world_size:
        short = table_bytes / world_size - budget
        raise PlanError(
            f"table {table} ({rows:,} rows x {dim} cols, {format_bytes(table_bytes)}) does not fit: "
            f"even split over all {world_size} ranks needs {format_bytes(table_bytes / world_size)} "
            f"per rank, {format_bytes(short)} more than the budget of {format_bytes(budget)}", table=table)
    return needed


def _slice_count(kind: str, table: int, rows: int, dim: int, table_bytes: int, world_size: int,
                 cfg: ShardingConfig, budget: Optional[int]) -> int:
    if kind == "row_sliced":
        needed = _check_row_slicable(table, rows, dim, table_bytes, world_size, budget)
        return max(2, min(needed, rows))
    if kind == "column_sliced":
        wanted = math.ceil(table_bytes / cfg.column_slice_threshold_bytes)
        return max(2, min(wanted, world_size, dim))
    return 1


def plan_embeddings(table_rows: Sequence[int], dim: int, world_size: int,
                    sharding: Optional[ShardingConfig] = None, optimizer_slots: int = 0,
                    lookups_per_sample: Optional[Sequence[float]] = None) -> Plan:
    """Place every table on `world_size` ranks (see the module docstring for the rules).

    When the tables do not fit the per-rank budget, the PlanError names the table that did not fit
    and the smallest budget at which this plan succeeds (`minimum_rank_memory`).
    """
    cfg = sharding or ShardingConfig()
    try:
        return _place(table_rows, dim, world_size, cfg, optimizer_slots, lookups_per_sample)
    except PlanError as error:
        minimum = minimum_rank_memory(table_rows, dim, world_size, cfg, optimizer_slots, lookups_per_sample)
        if minimum is None:
            raise
        raise _not_enough_memory(error, table_rows, dim, world_size, cfg, optimizer_slots, minimum) from None


def _plan_succeeds(table_rows, dim, world_size, cfg: ShardingConfig, optimizer_slots, lookups, budget) -> bool:
    try:
        _place(table_rows, dim, world_size, replace(cfg, rank_memory_bytes=budget), optimizer_slots, lookups)
    except PlanError:
        return False
    return True


SCAN_STEPS = 512  # resolution of the minimum-budget scan: 1/512 of the range between even share and whole model


def minimum_rank_memory(table_rows: Sequence[int], dim: int, world_size: int, sharding: ShardingConfig,
                        optimizer_slots: int = 0, lookups_per_sample: Optional[Sequence[float]] = None
                        ) -> Optional[int]:
    """The smallest per-rank budget (bytes) at which the plan succeeds, found over the planner itself:
    the plan succeeds with it and fails with one byte less. None if `sharding` has no budget or the
    plan already fits it.

    Nothing fits below the even share (the whole model / world size), and the whole model always fits
    (no table needs slicing). Success is not monotonic in the budget for every strategy (with `basic`
    and column slicing a larger budget can fail where a smaller one works), so the range between is
    scanned upward in SCAN_STEPS steps for the first budget that works, then bisected below it.
    """
    budget = sharding.rank_memory_bytes
    args = (table_rows, dim, world_size, sharding, optimizer_slots, lookups_per_sample)
    if budget is None or _plan_succeeds(*args, budget):
        return None
    high = sum(int(rows) for rows in table_rows) * dim * sharding.bytes_per_element * (1 + optimizer_slots)
    if not _plan_succeeds(*args, high):
        return None
    low = max(0, high // world_size - 1)  # below the even share nothing fits, whatever the given budget
    step = max(1, (high - low) // SCAN_STEPS)
    for candidate in range(low + step, high, step):
        if _plan_succeeds(*args, candidate):
            high = candidate
            break
        low = candidate
    while high - low > 1:
        middle = (low + high) // 2
        if _plan_succeeds(*args, middle):
            high = middle
        else:
            low = middle
    return high


def _not_enough_memory(error: PlanError, table_rows, dim, world_size, cfg: ShardingConfig, optimizer_slots,
                       minimum: int) -> PlanError:
    budget = cfg.rank_memory_bytes
    table = error.table
    where = ""
    if table is not None:
        table_bytes = int(table_rows[table]) * dim * cfg.bytes_per_element * (1 + optimizer_slots)
        where = (f"table {table} ({int(table_rows[table]):,} rows x {dim} cols, {format_bytes(table_bytes)} "
                 f"with {optimizer_slots} optimizer slot(s)) does not fit: ")
    need = (f"{where}the embedding tables need at least {format_bytes(minimum, round_up=True)} per rank on "
            f"{world_size} rank(s)")
    if minimum > budget:
        message = (f"{need}, short by {format_bytes(minimum - budget, round_up=True)} per rank over the budget of "
                   f"{format_bytes(budget)} (--rank_memory): raise --rank_memory if the ranks have the memory, or "
                   f"use more ranks, a smaller --embedding_dim or an optimizer with fewer slots")
    else:  # success is not monotonic in the budget for every strategy: a smaller one can work
        message = (f"{need}, and this placement ({cfg.strategy}) fails at the budget of {format_bytes(budget)} "
                   f"(--rank_memory) but succeeds at {format_bytes(minimum, round_up=True)}: pass that budget, or "
                   f"use the memory_balanced strategy")
    found = PlanError(message, table=table)
    found.minimum_rank_memory = minimum
    return found


def _place(table_rows: Sequence[int], dim: int, world_size: int, cfg: ShardingConfig, optimizer_slots: int,
           lookups_per_sample: Optional[Sequence[float]]) -> Plan:
    if cfg.strategy not in STRATEGIES:
        raise ValueError(f"unknown sharding strategy {cfg.strategy!r}; choose one of {STRATEGIES}")
    if world_size < 1 or dim < 1:
        raise ValueError(f"world_size and dim must be positive (got {world_size}, {dim})")
    rows_list = [int(r) for r in table_rows]
    for t, rows in enumerate(rows_list):
        if rows < 1:
            raise ValueError(f"table {t} has {rows} rows; every table needs at least one row")
    hotness = [1.0] * len(rows_list) if lookups_per_sample is None else [float(h) for h in lookups_per_sample]
    if len(hotness) != len(rows_list):
        raise ValueError(f"{len(hotness)} lookup counts given for {len(rows_list)} tables")
    element_bytes = cfg.bytes_per_element * (1 + optimizer_slots)
    budget = cfg.rank_memory_bytes
    table_bytes = [rows * dim * element_bytes for rows in rows_list]

    ranks = [RankLoad(rank=r) for r in range(world_size)]
    placements: List[TablePlacement] = []
    pending = []  # (table, row range, col range) of pieces still without a rank
    fluid = []  # memory_balanced: row-sliced tables, cut after the other pieces are placed
    for t, rows in enumerate(rows_list):
        kind = _table_kind(table_bytes[t], world_size, cfg, budget)
        placements.append(TablePlacement(table=t, rows=rows, kind=kind, pieces=[],
                                         lookups_per_sample=hotness[t]))
        if kind == "replicated":
            for load in ranks:
                placements[t].pieces.append(Piece(load.rank, 0, rows, 0, dim))
                load.memory_bytes += table_bytes[t]
                load.lookup_load += hotness[t] * dim / world_size  # local rows only
                load.tables.append(t)
            continue
        if kind == "row_sliced" and cfg.strategy == "memory_balanced":
            _check_row_slicable(t, rows, dim, table_bytes[t], world_size, budget)
            fluid.append(t)  # cut later, to fill ranks up to a common level
            continue
        count = _slice_count(kind, t, rows, dim, table_bytes[t], world_size, cfg, budget)
        if kind == "row_sliced":
            pending += [(t, r, (0, dim)) for r in _even_ranges(rows, count)]
        elif kind == "column_sliced":
            pending += [(t, (0, rows), c) for c in _even_ranges(dim, count)]
        else:
            pending.append((t, (0, rows), (0, dim)))

    def piece_bytes(item) -> int:
        _, (r0, r1), (c0, c1) = item
        return (r1 - r0) * (c1 - c0) * element_bytes

    def piece_lookups(item) -> float:
        t, (r0, r1), (c0, c1) = item
        return hotness[t] * (c1 - c0) * (r1 - r0) / rows_list[t]

    def assign(item, load: RankLoad) -> None:
        t, (r0, r1), (c0, c1) = item
        load.memory_bytes += piece_bytes(item)
        load.lookup_load += piece_lookups(item)
        load.tables.append(t)
        placements[t].pieces.append(Piece(load.rank, r0, r1, c0, c1))

    def no_room(item) -> PlanError:
        t, size = item[0], piece_bytes(item)
        free = max((budget - load.memory_bytes for load in ranks if t not in load.tables), default=0)
        return PlanError(
            f"table {t} ({rows_list[t]:,} rows x {dim} cols): a piece of {format_bytes(size)} fits on "
            f"no rank; the emptiest eligible rank has {format_bytes(free)} free of "
            f"{format_bytes(budget)}, short by {format_bytes(size - free)} (the whole model needs "
            f"{format_bytes(sum(table_bytes))}, the cluster has {format_bytes(budget * world_size)})", table=t)

    if cfg.strategy == "memory_balanced":
        # Largest first; stable sort keeps table order among equal sizes (deterministic plans).
        pending.sort(key=lambda item: -piece_bytes(item))
    total_bytes = max(sum(table_bytes), 1)
    total_lookups = max(sum(hotness[t] * dim for t in range(len(rows_list))), 1e-9)
    next_rank = 0
    for item in pending:
        t, size, lookups = item[0], piece_bytes(item), piece_lookups(item)
        eligible = [load for load in ranks if t not in load.tables
                    and (budget is None or load.memory_bytes + size <= budget)]
        if not eligible:
            raise no_room(item)
        if cfg.strategy == "basic":
            order = [ranks[(next_rank + i) % world_size] for i in range(world_size)]
            chosen = next(load for load in order if load in eligible)
            next_rank = (chosen.rank + 1) % world_size
        else:
            chosen = min(eligible, key=lambda load: (
                (load.memory_bytes + size) / total_bytes + (load.lookup_load + lookups) / total_lookups,
                load.rank))
        assign(item, chosen)
    _fill_row_slices(fluid, rows_list, dim, element_bytes, ranks, budget, assign)
    for placement in placements:
        placement.pieces.sort(key=lambda p: (p.row_start, p.col_start, p.rank))
    for load in ranks:
        load.tables.sort()
    return Plan(world_size=world_size, dim=dim, strategy=cfg.strategy,
                bytes_per_element=cfg.bytes_per_element, optimizer_slots=optimizer_slots,
                tables=placements, ranks=ranks)


def _water_level(loads: Sequence[int], amount: int) -> float:
    """Level L with sum(max(0, L - load)) == amount: pouring `amount` onto the emptiest ranks."""
    ordered = sorted(loads)
    for k in range(len(ordered), 0, -1):
        level = (amount + sum(ordered[:k])) / k
        if level >= ordered[k - 1]:
            return level
    return ordered[0] + amount  # unreachable with k == 1, kept for type checkers


def _fill_row_slices(fluid: Sequence[int], rows_list, dim, element_bytes, ranks, budget, assign) -> None:
    """Cut the tables in `fluid` (largest first) into contiguous row ranges that fill every rank up
    to one common level: the emptiest ranks take the most rows, so per-rank memory ends up even."""
    if not fluid:
        return
    row_bytes = dim * element_bytes
    amount = sum(rows_list[t] * row_bytes for t in fluid)
    level = _water_level([load.memory_bytes for load in ranks], amount)
    if level > budget:
        t = max(fluid, key=lambda i: rows_list[i])
        raise PlanError(
            f"table {t} ({rows_list[t]:,} rows x {dim} cols) and the other row-sliced tables do not fit: "
            f"spreading them evenly needs {format_bytes(level)} on the fullest ranks, short by "
            f"{format_bytes(level - budget)} per rank over the budget of {format_bytes(budget)}", table=t)
    for t in sorted(fluid, key=lambda i: -rows_list[i]):
        row, rows = 0, rows_list[t]
        by_room = sorted(ranks, key=lambda load: (load.memory_bytes - level, load.rank))
        for i, load in enumerate(by_room):
            # Round up (at most one row over the level per piece) so no sliver is left for the
            # next rank; round down only where rounding up would break the budget.
            room = max(0.0, level - load.memory_bytes)
            room_rows = math.ceil(room / row_bytes)
            if budget is not None and load.memory_bytes + room_rows * row_bytes > budget:
                room_rows = int(room // row_bytes)
            last = i == len(by_room) - 1
            take = rows - row if last else min(rows - row, room_rows)
            if take <= 0:
                continue
            if load.memory_bytes + take * row_bytes > budget:
                raise PlanError(
                    f"table {t} ({rows:,} rows x {dim} cols): rows [{row:,}:{rows:,}) fit on no rank, "
                    f"short by {format_bytes(load.memory_bytes + take * row_bytes - budget)}", table=t)
            assign((t, (row, row + take), (0, dim)), load)
            row += take
            if row == rows:
                break


# ------------------------------------------------------------------------------------------- CLI
def describe_plan(plan: Plan, preset: Optional[str] = None) -> str:
    """Human-readable plan: model size, every table's layout, per-rank memory and its spread."""
    rows_total = sum(t.rows for t in plan.tables)
    weights = rows_total * plan.dim * plan.bytes_per_element
    lines = [
        f"model{' ' + preset if preset else ''}: {len(plan.tables)} tables, {rows_total:,} rows x "
        f"{plan.dim} = {rows_total * plan.dim / 1e9:.2f}B params, weights {format_bytes(weights)} "
        f"({plan.bytes_per_element} B/element), with {plan.optimizer_slots} optimizer slot(s) "
        f"{format_bytes(weights * (1 + plan.optimizer_slots))}",
        f"world size {plan.world_size}, strategy {plan.strategy}",
        "",
        f"{'table':>5} {'rows':>13} {'kind':<13} pieces (rank: rows x cols)",
    ]
    for t in plan.tables:
        if t.kind == "replicated":
            desc = f"all {len(t.pieces)} ranks"
        else:
            desc = ", ".join(
                f"r{p.rank}" + ("" if t.kind == "table_wise" else
                                f": [{p.row_start:,}:{p.row_end:,}]" if t.kind == "row_sliced" else
                                f": cols [{p.col_start}:{p.col_end}]")
                for p in t.pieces)
        lines.append(f"{t.table:>5} {t.rows:>13,} {t.kind:<13} {desc}")
    lines += ["", f"{'rank':>4} {'memory':>12} {'lookup load':>12} {'tables':>6}"]
    for r in plan.ranks:
        lines.append(f"{r.rank:>4} {format_bytes(r.memory_bytes):>12} {r.lookup_load:>12.1f} "
                     f"{len(r.tables):>6}")
    spread = plan.memory_spread()
    lines.append(
        f"per-rank memory: min {format_bytes(spread['min_bytes'])}, max {format_bytes(spread['max_bytes'])}, "
        f"mean {format_bytes(spread['mean_bytes'])}, max/mean {spread['max_over_mean']:.3f}")
    return "\n".join(lines)


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
    parser.add_argument("--strategy", choices=STRATEGIES, default="memory_balanced",
                        help="(default: memory_balanced)")
    parser.add_argument("--column_slice_threshold", type=positive_byte_size, default=None,
                        help="e.g. 4GiB (default: off)")
    parser.add_argument("--replicate_threshold", type=byte_size, default=0, help="e.g. 1MiB (default: 0 = off)")
    parser.add_argument("--bytes_per_element", type=positive_int, default=4, help="(default: 4)")
    parser.add_argument("--optimizer_slots", type=count, default=0,
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
        strategy=args.strategy,
        rank_memory_bytes=args.rank_memory,
        column_slice_threshold_bytes=args.column_slice_threshold,
        replicate_threshold_bytes=args.replicate_threshold,
        bytes_per_element=args.bytes_per_element)
    plan = plan_embeddings(rows, args.embedding_dim, args.world_size, sharding,
                           optimizer_slots=args.optimizer_slots)
    print(plan.to_json() if args.json else describe_plan(plan, args.preset))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(print_plan, argv)


if __name__ == "__main__":
    sys.exit(main())
