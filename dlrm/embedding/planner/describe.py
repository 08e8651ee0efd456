"""What the planner CLI prints: a plan in words, its exchange estimate, and the same tables on 8 ... 1024 ranks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from dlrm.config import ShardingConfig
from dlrm.embedding.planner.budget import plan_embeddings
from dlrm.embedding.planner.exchange_estimate import ExchangeEstimate, exchange_bytes
from dlrm.embedding.planner.plan import Plan, PlanError, TablePlacement
from dlrm.features import TableConfig
from dlrm.sizes import format_bytes

SCALING_WORLD_SIZES = tuple(2**k for k in range(3, 11))  # 8, 16, ..., 1024 ranks


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
    params = sum(t.rows * t.dim for t in plan.tables)
    rows_total = sum(t.rows for t in plan.tables)
    dims = sorted({t.dim for t in plan.tables})
    dim_text = f"dim {dims[0]}" if len(dims) == 1 else f"dims {dims[0]}..{dims[-1]}"
    weights = params * plan.bytes_per_element
    return [
        f"model{' ' + preset if preset else ''}: {len(plan.tables)} tables, {rows_total:,} rows, {dim_text}: "
        f"{params / 1e9:.2f}B params, weights {format_bytes(weights)} ({plan.bytes_per_element} B/element), "
        f"with {plan.optimizer_slots} optimizer slot(s) {format_bytes(weights * (1 + plan.optimizer_slots))}",
        f"world size {plan.world_size}, strategy {plan.strategy}",
        "",
        f"{'table':>5} {'name':<12} {'rows':>13} {'dim':>4} {'hot':>4} {'kind':<13} pieces (rank: rows x cols)",
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
    return (f"{placement.table:>5} {placement.name:<12} {placement.rows:>13,} {placement.dim:>4} "
            f"{placement.hotness:>4} {kind:<13} {where}")


def describe_exchange(estimate: ExchangeEstimate) -> str:
    """One plan's all-to-all bytes per rank and step (the busier direction of each rank's link)."""
    s = estimate.summary()
    return (f"all-to-all per rank and step at global batch {estimate.global_batch:,}: forward max "
            f"{format_bytes(s['forward_max_bytes'])}, mean {format_bytes(s['forward_mean_bytes'])}; backward max "
            f"{format_bytes(s['backward_max_bytes'])}, mean {format_bytes(s['backward_mean_bytes'])}; "
            f"replicated-gradient allgather {format_bytes(s['replicated_allgather_bytes'])}")


@dataclass(frozen=True)
class ScalingRow:
    """The plan's figures on one world size (`problem` set instead when the tables do not fit)."""

    world_size: int
    memory_max_bytes: int = 0
    memory_max_over_mean: float = 0.0
    exchange: Optional[dict] = None
    problem: Optional[str] = None

    def to_dict(self) -> dict:
        return {"world_size": self.world_size, "memory_max_bytes": self.memory_max_bytes,
                "memory_max_over_mean": self.memory_max_over_mean, "exchange": self.exchange,
                "problem": self.problem}


def scaling_rows(tables: Sequence[TableConfig], sharding: ShardingConfig, optimizer_slots: int, global_batch: int,
                 world_sizes: Sequence[int] = SCALING_WORLD_SIZES) -> List[ScalingRow]:
    """The same tables planned on each world size, with per-rank memory and the exchange estimate."""
    rows = []
    for world_size in world_sizes:
        try:
            plan = plan_embeddings(tables, world_size, sharding, optimizer_slots=optimizer_slots)
        except PlanError as error:
            minimum = error.minimum_rank_memory
            needs = f"needs {format_bytes(minimum, round_up=True)} per rank" if minimum else str(error)
            rows.append(ScalingRow(world_size, problem=f"does not fit: {needs}"))
            continue
        spread = plan.memory_spread()
        rows.append(ScalingRow(world_size, int(spread["max_bytes"]), spread["max_over_mean"],
                               exchange_bytes(plan, global_batch).summary()))
    return rows


def describe_scaling(rows: Sequence[ScalingRow], global_batch: int) -> str:
    """The scaling table: ranks, per-rank memory (max, max/mean), all-to-all bytes per rank and step."""
    lines = [f"global batch {global_batch:,}; all-to-all bytes per rank and step (max / mean over ranks)",
             f"{'ranks':>6} {'memory max':>12} {'max/mean':>8} {'fwd max':>12} {'fwd mean':>12} "
             f"{'bwd max':>12} {'bwd mean':>12} {'replicated':>12}"]
    for row in rows:
        if row.exchange is None:
            lines.append(f"{row.world_size:>6} {row.problem}")
            continue
        e = row.exchange
        figures = [e["forward_max_bytes"], e["forward_mean_bytes"], e["backward_max_bytes"],
                   e["backward_mean_bytes"], e["replicated_allgather_bytes"]]
        lines.append(f"{row.world_size:>6} {format_bytes(row.memory_max_bytes):>12} {row.memory_max_over_mean:>8.3f} "
                     + " ".join(f"{format_bytes(f):>12}" for f in figures))
    return "\n".join(lines)
