"""Planning within a per-rank memory budget: the plan, or the smallest budget at which one exists.

When the tables do not fit, the error names the table that did not fit and the smallest budget at
which this very strategy succeeds, found by running the placement itself (`minimum_rank_memory`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

from dlrm.config import ShardingConfig
from dlrm.embedding.planner.layout import TableSizes, check_tables
from dlrm.embedding.planner.plan import Plan, PlanError
from dlrm.embedding.planner.strategies import check_strategy, place
from dlrm.features import TableConfig
from dlrm.sizes import format_bytes

SCAN_STEPS = 512  # resolution of the minimum-budget scan: 1/512 of the range between even share and whole model


def _checked(tables: Sequence[TableConfig], world_size: int, cfg: ShardingConfig, optimizer_slots: int) -> TableSizes:
    check_strategy(cfg.strategy)
    return check_tables(tables, world_size, cfg.bytes_per_element, optimizer_slots)


def plan_embeddings(tables: Sequence[TableConfig], world_size: int, sharding: Optional[ShardingConfig] = None,
                    optimizer_slots: int = 0) -> Plan:
    """Place every table on `world_size` ranks (see `dlrm.embedding.planner` for the rules).

    When the tables do not fit the per-rank budget, the PlanError names the table that did not fit
    and the smallest budget at which this plan succeeds (`minimum_rank_memory`).
    """
    cfg = sharding or ShardingConfig()
    checked = _checked(tables, world_size, cfg, optimizer_slots)
    try:
        return place(checked, cfg)
    except PlanError as error:
        minimum = _minimum_budget(checked, cfg)
        if minimum is None:
            raise
        raise _not_enough_memory(error, checked, cfg, minimum) from None


def minimum_rank_memory(tables: Sequence[TableConfig], world_size: int, sharding: ShardingConfig,
                        optimizer_slots: int = 0) -> Optional[int]:
    """The smallest per-rank budget (bytes) at which the plan succeeds, found over the planner itself:
    the plan succeeds with it and fails with one byte less. None if `sharding` has no budget or the
    plan already fits it.
    """
    if sharding.rank_memory_bytes is None:
        return None
    return _minimum_budget(_checked(tables, world_size, sharding, optimizer_slots), sharding)


def _plan_succeeds(tables: TableSizes, cfg: ShardingConfig, budget: int) -> bool:
    try:
        place(tables, replace(cfg, rank_memory_bytes=budget))
    except PlanError:
        return False
    return True


def _minimum_budget(tables: TableSizes, cfg: ShardingConfig) -> Optional[int]:
    """`minimum_rank_memory` of checked tables.

    Nothing fits below the even share (the whole model / world size), and the whole model always fits
    (no table needs slicing). Success is not monotonic in the budget for every strategy (with `basic`
    and column slicing a larger budget can fail where a smaller one works), so the range between is
    scanned upward in SCAN_STEPS steps for the first budget that works, then bisected below it.
    """
    budget = cfg.rank_memory_bytes
    if budget is None or _plan_succeeds(tables, cfg, budget):
        return None
    high = tables.total_bytes()
    if not _plan_succeeds(tables, cfg, high):
        return None
    low = max(0, high // tables.world_size - 1)  # below the even share nothing fits, whatever the given budget
    low, high = _scan_for_a_fit(tables, cfg, low, high)
    return _bisect(tables, cfg, low, high)


def _scan_for_a_fit(tables: TableSizes, cfg: ShardingConfig, low: int, high: int) -> tuple[int, int]:
    """(last failing, first succeeding) budget of an upward scan of (low, high) in SCAN_STEPS steps."""
    step = max(1, (high - low) // SCAN_STEPS)
    for candidate in range(low + step, high, step):
        if _plan_succeeds(tables, cfg, candidate):
            return low, candidate
        low = candidate
    return low, high


def _bisect(tables: TableSizes, cfg: ShardingConfig, low: int, high: int) -> int:
    """The smallest succeeding budget in (low, high], given that low fails and high succeeds."""
    while high - low > 1:
        middle = (low + high) // 2
        if _plan_succeeds(tables, cfg, middle):
            high = middle
        else:
            low = middle
    return high


def _not_enough_memory(error: PlanError, tables: TableSizes, cfg: ShardingConfig, minimum: int) -> PlanError:
    """The error a user sees: what does not fit, and the budget that works (`minimum`)."""
    budget = cfg.rank_memory_bytes
    assert budget is not None  # a minimum is found only against a budget
    slots, table = tables.optimizer_slots, error.table
    where = ""
    if table is not None:
        where = (f"{tables.title(table)}, {format_bytes(tables.table_bytes(table))} "
                 f"with {slots} optimizer slot(s)) does not fit: ")
    need = (f"{where}the embedding tables need at least {format_bytes(minimum, round_up=True)} per rank on "
            f"{tables.world_size} rank(s)")
    if minimum > budget:
        remedy = ("lower --replicate_threshold (every rank holds the replicated tables whole, so more ranks do "
                  "not help)" if error.replicas else
                  "use more ranks, smaller embedding dims (--embedding_dim or the feature spec's embedding_dim) "
                  "or an optimizer with fewer slots")
        message = (f"{need}, short by {format_bytes(minimum - budget, round_up=True)} per rank over the budget of "
                   f"{format_bytes(budget)} (--rank_memory): raise --rank_memory if the ranks have the memory, or "
                   f"{remedy}")
    else:  # success is not monotonic in the budget for every strategy: a smaller one can work
        message = (f"{need}, and this placement ({cfg.strategy}) fails at the budget of {format_bytes(budget)} "
                   f"(--rank_memory) but succeeds at {format_bytes(minimum, round_up=True)}: pass that budget, or "
                   f"use the memory_balanced strategy")
    found = PlanError(message, table=table)
    found.minimum_rank_memory = minimum
    return found
