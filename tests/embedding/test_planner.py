"""The placement planner: pure Python, public model sizes, every layout kind, errors, the CLI."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest

from dlrm.config import ShardingConfig
from dlrm.data.synthetic.criteo import preset_cardinalities
from dlrm.embedding.optimizer_slots import slots_for_optimizer
from dlrm.embedding.planner import Plan, PlanError, minimum_rank_memory, plan_embeddings
from dlrm.embedding.planner.assignment import Assignment
from dlrm.embedding.planner.layout import check_tables, lay_out
from dlrm.embedding.planner.strategies import place_largest_first
from dlrm.features import one_hot_tables
from dlrm.sizes import GiB, format_bytes, parse_bytes
from tests.support import ROOT


def _run(args, timeout=60):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _check_covering(plan: Plan, rows_list, dim):
    """Non-replicated tables: pieces tile the table exactly once; replicated: one full copy per rank."""
    for placement, rows in zip(plan.tables, rows_list):
        assert placement.rows == rows
        if placement.kind == "replicated":
            assert sorted(owned.rank for owned in placement.pieces) == list(range(plan.world_size))
            assert all((p.row_start, p.row_end, p.col_start, p.col_end) == (0, rows, 0, dim)
                       for _, p in placement.pieces)
            continue
        assert all(p.table == placement.table for _, p in placement.pieces)
        area = sum(p.shape[0] * p.shape[1] for _, p in placement.pieces)
        assert area == rows * dim, placement
        ranks = [owned.rank for owned in placement.pieces]
        assert len(set(ranks)) == len(ranks), "two pieces of one table on one rank"
        if placement.kind == "row_sliced":
            bounds = [(p.row_start, p.row_end) for _, p in placement.pieces]
            assert bounds[0][0] == 0 and bounds[-1][1] == rows
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:])), "row ranges not contiguous"
            assert all(p.col_start == 0 and p.col_end == dim for _, p in placement.pieces)
        if placement.kind == "column_sliced":
            bounds = [(p.col_start, p.col_end) for _, p in placement.pieces]
            assert bounds[0][0] == 0 and bounds[-1][1] == dim
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def _check_memory(plan: Plan, rows_list, dim, element_bytes):
    per_rank = [0] * plan.world_size
    for placement in plan.tables:
        for rank, p in placement.pieces:
            per_rank[rank] += p.shape[0] * p.shape[1] * element_bytes
    assert per_rank == [r.memory_bytes for r in plan.ranks]


def test_importing_the_planner_and_running_its_cli_never_imports_tensorflow():
    code = ("import sys, dlrm.embedding.planner.cli as p; p.main(['--preset', 't0', '--world_size', '8', "
            "'--rank_memory', '80GiB']); assert 'tensorflow' not in sys.modules, 'tensorflow imported'; "
            "print('NO_TF')")
    result = _run(["-c", code])
    assert result.returncode == 0, result.stderr
    assert "NO_TF" in result.stdout


@pytest.mark.parametrize("preset,params_billion,gib", [("t15", 4.19, 15.6), ("t3", 22.8, 84.9),
                                                       ("t0", 113.0, 421.0)])
def test_public_model_sizes_are_reproduced_with_and_without_the_id0_row(preset, params_billion, gib):
    for reserve_zero in (False, True):
        rows = preset_cardinalities(preset, reserve_zero=reserve_zero)
        plan = plan_embeddings(one_hot_tables(rows, 128), 1)
        assert round(sum(rows) * 128 / 1e9, 2 if preset == "t15" else 1) == params_billion
        assert round(plan.total_memory_bytes / GiB, 1 if gib < 100 else 0) == gib


def test_t0_on_8_ranks_of_80_gib_row_slices_the_big_tables_and_balances_memory():
    rows = preset_cardinalities("t0")
    plan = plan_embeddings(one_hot_tables(rows, 128), 8, ShardingConfig(rank_memory_bytes=80 * GiB))
    _check_covering(plan, rows, 128)
    _check_memory(plan, rows, 128, 4)
    kinds = {t.table: t.kind for t in plan.tables}
    # Tables over 80 GiB (0: 108.5, 19: 139.6, 21: 89.3 GiB) must be row-sliced; table 9 (62.1 GiB, above the
    # even share of 52.6 GiB) is row-sliced too so that memory balances; the rest stay whole.
    assert {t for t, k in kinds.items() if k == "row_sliced"} == {0, 9, 19, 21}
    assert all(r.memory_bytes <= 80 * GiB for r in plan.ranks)
    assert plan.memory_spread()["max_over_mean"] <= 1.05


def test_t0_at_dim_512_fits_32_ranks_of_80_gib():
    rows = preset_cardinalities("t0")
    plan = plan_embeddings(one_hot_tables(rows, 512), 32, ShardingConfig(rank_memory_bytes=80 * GiB))
    assert plan.total_memory_bytes / GiB == pytest.approx(1683.76, abs=0.01)  # the "1.68 TB" (GiB x 1000)
    _check_covering(plan, rows, 512)
    _check_memory(plan, rows, 512, 4)
    assert max(r.memory_bytes for r in plan.ranks) <= 80 * GiB


def test_basic_round_robin_ignores_sizes_and_memory_balanced_is_flatter():
    rows = preset_cardinalities("t0")
    cfg = dict(rank_memory_bytes=80 * GiB)
    basic = plan_embeddings(one_hot_tables(rows, 128), 8, ShardingConfig(strategy="basic", **cfg))
    balanced = plan_embeddings(one_hot_tables(rows, 128), 8, ShardingConfig(strategy="memory_balanced", **cfg))
    _check_covering(basic, rows, 128)
    _check_memory(basic, rows, 128, 4)
    # Round robin: the n-th placed piece goes to rank n mod 8 (tables 1..8 after table 0's 2 slices).
    assert [t.pieces[0].rank for t in basic.tables[1:7]] == [2, 3, 4, 5, 6, 7]
    assert balanced.memory_spread()["max_over_mean"] < basic.memory_spread()["max_over_mean"]
    assert ShardingConfig().strategy == "memory_balanced"


def test_memory_balanced_spreads_lookups_of_small_tables():
    # One big table whole on a rank and many tiny ones: the largest-first stage spreads the tiny ones evenly
    # over the other ranks instead of piling them onto the rank with the least memory (which is what
    # memory-only greedy would do). (The full plan then row-slices the big table to even out memory.)
    tables = check_tables(one_hot_tables([1_000_000] + [100] * 12, 16), 4, 4, 0)
    layouts = lay_out(tables, ShardingConfig())
    assignment = Assignment(tables, layouts, None)
    place_largest_first(assignment, [piece for layout in layouts for piece in layout.slices])
    big_rank = assignment.placements[0].pieces[0].rank
    assert assignment.ranks[big_rank].tables == [0]
    others = [r.lookup_load for r in assignment.ranks if r.rank != big_rank]
    assert others == [4 * 16.0] * 3


def test_all_four_kinds_in_one_plan_with_thresholds_and_optimizer_slots():
    rows = [5000, 40, 200, 900, 30]
    dim = 8
    cfg = ShardingConfig(rank_memory_bytes=4000 * dim * 4 * 2, column_slice_threshold_bytes=300 * dim * 8,
                         replicate_threshold_bytes=50 * dim * 8)
    plan = plan_embeddings(one_hot_tables(rows, dim), 3, cfg, optimizer_slots=1)
    kinds = [t.kind for t in plan.tables]
    assert kinds == ["row_sliced", "replicated", "table_wise", "column_sliced", "replicated"]
    _check_covering(plan, rows, dim)
    _check_memory(plan, rows, dim, 8)  # weights + one slot
    assert plan.optimizer_slots == 1
    assert [len(t.pieces) for t in plan.tables][3] == 3  # one column slice per rank (3, 3, 2 columns)
    assert sorted(p.shape[1] for _, p in plan.tables[3].pieces) == [2, 3, 3]
    # Replicated lookups are local (1/N of the batch each); every rank holds both replicas.
    assert all({1, 4} <= set(r.tables) for r in plan.ranks)


def test_optimizer_slots_multiply_memory():
    rows = preset_cardinalities("t15")
    base = plan_embeddings(one_hot_tables(rows, 128), 4).total_memory_bytes
    assert plan_embeddings(one_hot_tables(rows, 128), 4, optimizer_slots=2).total_memory_bytes == 3 * base
    assert slots_for_optimizer("sgd") == 0 and slots_for_optimizer("adagrad") == 1
    assert slots_for_optimizer("adam") == 2


def test_world_size_one_keeps_every_table_whole():
    plan = plan_embeddings(one_hot_tables([10, 20], 4), 1, ShardingConfig(replicate_threshold_bytes=10**9,
                                                          column_slice_threshold_bytes=1))
    assert [t.kind for t in plan.tables] == ["table_wise", "table_wise"]
    assert plan.pieces_on_rank(0)[1].shape == (20, 4)


def test_error_names_the_table_and_the_shortfall():
    rows = preset_cardinalities("t0")
    with pytest.raises(PlanError, match=r"table 'cat_19' .*292,775,615 rows.*short by"):
        plan_embeddings(one_hot_tables(rows, 128), 2, ShardingConfig(rank_memory_bytes=80 * GiB))
    # t0 is 420.94 GiB: 4 ranks need a quarter of it each, 105.24 GiB, 25.24 GiB over 80 GiB
    with pytest.raises(PlanError, match=r"table 'cat_19' .*at least 105\.24 GiB per rank.*short by 25\.24 GiB per "):
        plan_embeddings(one_hot_tables(rows, 128), 4, ShardingConfig(rank_memory_bytes=80 * GiB))
    # A table-wise piece that no rank has room for (basic strategy, no row slicing needed).
    with pytest.raises(PlanError, match=r"table 'cat_2' .*short by"):
        plan_embeddings(one_hot_tables([100, 100, 100], 10), 2,
                        ShardingConfig(strategy="basic", rank_memory_bytes=100 * 10 * 4 + 10))


def test_plan_json_round_trip_is_exact():
    rows = [5000, 40, 600, 900]
    plan = plan_embeddings(one_hot_tables(rows, 8), 3, ShardingConfig(rank_memory_bytes=5000 * 8 * 3,
                                                      column_slice_threshold_bytes=800 * 32,
                                                      replicate_threshold_bytes=50 * 32))
    text = plan.to_json()
    again = Plan.from_dict(json.loads(text))
    assert again == plan
    assert again.pieces_on_rank(1) == plan.pieces_on_rank(1)


def test_parse_bytes_units():
    assert parse_bytes("80GiB") == 80 * GiB
    assert parse_bytes("2TB") == 2 * 2**40  # every unit is a power of 1024 (dlrm.sizes)
    assert parse_bytes("512") == 512
    assert parse_bytes("1gib") == GiB and parse_bytes("16k") == 16 * 1024  # any case; main.py's flags use this
    with pytest.raises(ValueError, match="invalid size 'lots'"):
        parse_bytes("lots")


def test_cli_prints_plan_and_spread_and_reports_errors():
    ok = _run(["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8",
               "--rank_memory", "80GiB"])
    assert ok.returncode == 0, ok.stderr
    assert "113.00B params" in ok.stdout and "420.94 GiB" in ok.stdout
    assert ok.stdout.count("row_sliced") == 4  # the three tables above 80 GiB, and table 9 to balance memory
    assert "per-rank memory: min" in ok.stdout and "max/mean" in ok.stdout
    big = _run(["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "32",
                "--rank_memory", "80GiB", "--embedding_dim", "512", "--json"])
    assert big.returncode == 0, big.stderr
    assert json.loads(big.stdout)["world_size"] == 32
    bad = _run(["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "4",
                "--rank_memory", "80GiB"])
    assert bad.returncode == 1 and "short by" in bad.stderr and "table 'cat_19'" in bad.stderr


def _minimum_from_error(rows, dim, world_size, sharding, slots=0):
    with pytest.raises(PlanError) as caught:
        plan_embeddings(one_hot_tables(rows, dim), world_size, sharding, optimizer_slots=slots)
    return caught.value


def replace_budget(sharding, budget):
    return dataclasses.replace(sharding, rank_memory_bytes=budget)


@pytest.mark.parametrize("budget_gib", [16, 17.5, 40])
def test_reported_minimum_is_where_the_plan_starts_to_succeed(budget_gib):
    """t0 on 8 ranks: at 16 GiB the planner said 'needs 17.45 GiB' although 17.5 GiB fails too. The
    reported figure is the smallest budget that works: the plan succeeds there and fails one byte below,
    and the rounded figure printed in the message (what a user types back) succeeds too."""
    rows = preset_cardinalities("t0")
    error = _minimum_from_error(rows, 128, 8, ShardingConfig(rank_memory_bytes=int(budget_gib * GiB)))
    minimum = error.minimum_rank_memory
    assert minimum is not None and minimum > budget_gib * GiB
    plan_embeddings(one_hot_tables(rows, 128), 8, ShardingConfig(rank_memory_bytes=minimum))
    with pytest.raises(PlanError):
        plan_embeddings(one_hot_tables(rows, 128), 8, ShardingConfig(rank_memory_bytes=minimum - 1))
    printed = re.search(r"need at least ([0-9.]+ GiB) per rank", str(error)).group(1)
    assert parse_bytes(printed.replace(" ", "")) >= minimum
    budget = parse_bytes(printed.replace(" ", ""))
    plan_embeddings(one_hot_tables(rows, 128), 8, ShardingConfig(rank_memory_bytes=budget))
    assert printed == "52.62 GiB"  # 420.94 GiB over 8 ranks: the whole model, not table 19 alone


@pytest.mark.parametrize("strategy, slots, world_size", [("basic", 0, 3), ("memory_balanced", 2, 3),
                                                         ("memory_balanced", 1, 1)])
def test_minimum_holds_for_every_strategy_slot_count_and_one_rank(strategy, slots, world_size):
    rows = [5000, 40, 600, 900, 3000, 7]
    sharding = ShardingConfig(strategy=strategy, rank_memory_bytes=10_000,
                              replicate_threshold_bytes=40 * 8 * 4 * (1 + slots))
    error = _minimum_from_error(rows, 8, world_size, sharding, slots)
    minimum = error.minimum_rank_memory
    assert minimum == minimum_rank_memory(one_hot_tables(rows, 8), world_size, sharding, slots)
    ok = plan_embeddings(one_hot_tables(rows, 8), world_size, replace_budget(sharding, minimum), optimizer_slots=slots)
    assert max(r.memory_bytes for r in ok.ranks) <= minimum
    with pytest.raises(PlanError):
        plan_embeddings(one_hot_tables(rows, 8), world_size, replace_budget(sharding, minimum - 1),
                        optimizer_slots=slots)
    if world_size == 1:  # one rank holds everything: the minimum is the whole model
        assert minimum == sum(rows) * 8 * 4 * (1 + slots)


def test_cli_reports_the_true_minimum_without_a_traceback():
    low = _run(["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8", "--rank_memory", "16GiB"])
    assert low.returncode == 1 and "Traceback" not in low.stderr
    assert low.stderr.count("error:") == 1 and "need at least 52.62 GiB per rank" in low.stderr, low.stderr
    enough = _run(["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8",
                   "--rank_memory", "52.62GiB"])
    assert enough.returncode == 0, enough.stderr


@pytest.mark.parametrize("budget_gib", [100, 210])
def test_minimum_is_found_where_success_is_not_monotonic_in_the_budget(budget_gib):
    """t0 on 8 ranks, round-robin placement with column slicing and 2 slots: 193.5 GiB fits but 210 GiB
    does not. Either budget reports the same minimum below both, which fits, and fails one byte below."""
    rows = preset_cardinalities("t0")
    sharding = ShardingConfig(strategy="basic", column_slice_threshold_bytes=4 * GiB,
                              rank_memory_bytes=budget_gib * GiB)
    error = _minimum_from_error(rows, 128, 8, sharding, 2)
    minimum = error.minimum_rank_memory
    assert minimum < 194 * GiB, format_bytes(minimum)
    plan_embeddings(one_hot_tables(rows, 128), 8, replace_budget(sharding, minimum), optimizer_slots=2)
    with pytest.raises(PlanError):
        plan_embeddings(one_hot_tables(rows, 128), 8, replace_budget(sharding, minimum - 1), optimizer_slots=2)


def test_replicated_tables_count_against_the_budget_on_every_rank():
    # Both tables are replicated: 160 + 320 B = 480 B on every rank, so 479 B per rank is too little.
    tables, sharding = one_hot_tables([10, 20], 4), ShardingConfig(replicate_threshold_bytes=320)
    plan = plan_embeddings(tables, 2, dataclasses.replace(sharding, rank_memory_bytes=480))
    assert [t.kind for t in plan.tables] == ["replicated", "replicated"]
    with pytest.raises(PlanError, match=r"table 'cat_1' .*at least 480 B per rank.*lower --replicate_threshold"):
        plan_embeddings(tables, 2, dataclasses.replace(sharding, rank_memory_bytes=479))
