"""Per-rank memory of the memory_balanced plans: within 5% of the even share on 8 ... 1024 ranks for the
Criteo presets and the MLPerf DLRM-DCNv2 multi-hot shape; per-table dims and hotness in memory and lookups;
the lookup load evened out within that memory."""
from __future__ import annotations

import pytest

from dlrm.config import ShardingConfig
from dlrm.data.synthetic.criteo import T0, preset_cardinalities
from dlrm.embedding.planner import Plan, plan_embeddings
from dlrm.embedding.planner.assignment import Assignment
from dlrm.embedding.planner.layout import check_tables, lay_out
from dlrm.embedding.planner.lookup_balance import MIN_GAIN, even_out_lookups
from dlrm.embedding.planner.strategies import _lookups_evened
from dlrm.features import TableConfig, one_hot_tables
from dlrm.sizes import GiB

# MLPerf DLRM-DCNv2: Criteo 1TB counts capped at 40M rows, multi-hot with these ids per row.
MLPERF_HOTNESS = (3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1)
MLPERF_TABLES = tuple(TableConfig(f"cat_{i}", min(rows, 40_000_000), 128, hotness, multi_hot=True)
                      for i, (rows, hotness) in enumerate(zip(T0, MLPERF_HOTNESS)))
WORLD_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


def _tables(name):
    return MLPERF_TABLES if name == "mlperf" else one_hot_tables(preset_cardinalities(name), 128)


def _held_bytes(plan: Plan, element_bytes: int) -> list:
    """Every rank's memory recomputed from its pieces and each table's own dim."""
    held = [0] * plan.world_size
    for placement in plan.tables:
        for rank, piece in placement.pieces:
            assert piece.col_end <= placement.dim
            held[rank] += piece.shape[0] * piece.shape[1] * element_bytes
    return held


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("preset", ["t15", "t3", "t0", "mlperf"])
def test_per_rank_memory_is_within_5_percent_of_the_even_share(preset, world_size):
    tables = _tables(preset)
    plan = plan_embeddings(tables, world_size)
    assert plan.memory_spread()["max_over_mean"] <= 1.05
    assert _held_bytes(plan, 4) == [r.memory_bytes for r in plan.ranks]
    assert sum(r.memory_bytes for r in plan.ranks) == sum(t.rows * t.dim * 4 for t in tables)
    row_sliced = [p for p in plan.tables if p.kind == "row_sliced"]
    assert len(row_sliced) < len(tables)  # balance by cutting the big tables, not every table


def test_t0_on_8_ranks_of_80_gib_is_within_5_percent_of_the_even_share():
    plan = plan_embeddings(_tables("t0"), 8, ShardingConfig(rank_memory_bytes=80 * GiB))
    spread = plan.memory_spread()
    assert spread["max_over_mean"] <= 1.05 and spread["max_bytes"] <= 80 * GiB
    assert spread["mean_bytes"] / GiB == pytest.approx(52.62, abs=0.01)


def test_memory_counts_each_tables_own_dim_and_lookups_its_hotness():
    tables = [TableConfig("wide", 1000, 64), TableConfig("bag", 500, 8, hotness=5, multi_hot=True),
              TableConfig("narrow", 2000, 4)]
    plan = plan_embeddings(tables, 1, optimizer_slots=1)
    assert plan.ranks[0].memory_bytes == (1000 * 64 + 500 * 8 + 2000 * 4) * 4 * 2
    assert plan.ranks[0].lookup_load == 64 + 5 * 8 + 4  # elements fetched per sample: hotness x dim
    assert [(p.name, p.dim, p.hotness, p.lookups_per_sample) for p in plan.tables] == [
        ("wide", 64, 1, 1.0), ("bag", 8, 5, 5.0), ("narrow", 4, 1, 1.0)]
    assert plan.pieces_on_rank(0)[1].shape == (500, 8)


def test_column_slices_cut_each_tables_own_dim():
    tables = [TableConfig("a", 100, 6), TableConfig("b", 100, 16)]
    plan = plan_embeddings(tables, 2, ShardingConfig(column_slice_threshold_bytes=100 * 5 * 4))
    assert [[(p.col_start, p.col_end) for _, p in t.pieces] for t in plan.tables] == [[(0, 3), (3, 6)],
                                                                                     [(0, 8), (8, 16)]]
    assert [r.memory_bytes for r in plan.ranks] == [100 * 11 * 4] * 2


def _lookup_peak_over_mean(plan: Plan) -> float:
    loads = [r.lookup_load for r in plan.ranks]
    return max(loads) * len(loads) / sum(loads)


def test_the_multi_hot_benchmark_model_splits_its_lookups_almost_evenly_over_2_ranks():
    # The benchmarks' multi-hot shape: the MLPerf hotness, tables capped at 200k rows. One 100-hot table
    # carries 47% of the lookups in 12% of the memory: placed by memory alone, its rank gathered 1.31x
    # the mean; whole tables moved within the memory tolerance bring that to 1.08x (the best split is
    # 1.06x: four 200k-row tables per rank, the 100-hot one with the three lightest).
    tables = [TableConfig(t.name, min(t.rows, 200_000), 128, t.hotness, multi_hot=True) for t in MLPERF_TABLES]
    plan = plan_embeddings(tables, 2)
    assert plan.memory_spread()["max_over_mean"] <= 1.05
    assert _lookup_peak_over_mean(plan) <= 1.08
    hundred_hot = plan.tables[20].pieces[0].rank
    big_ones = [p.hotness for p in plan.tables if p.rows == 200_000 and p.pieces[0].rank == hundred_hot]
    assert sorted(big_ones) == [3, 3, 7, 100]


@pytest.mark.parametrize("ceiling_rows,loads", [(200, [5, 5]), (300, [5, 5]), (199, [8, 2])])
def test_lookups_even_out_by_the_best_move_or_swap_within_the_memory_ceiling(ceiling_rows, loads):
    # Rank 0 holds two 4-hot tables, rank 1 two 1-hot ones, all of 100 rows x 1 column. Swapping a 4-hot
    # for a 1-hot table evens them out (5 and 5); moving one would leave 4 and 6, so the swap wins even
    # where the ceiling allows the move; a ceiling below the current memory allows nothing.
    tables = check_tables([TableConfig(name, 100, 1, hotness, multi_hot=True)
                           for name, hotness in (("a", 4), ("b", 4), ("c", 1), ("d", 1))], 2, 4, 0)
    assignment = Assignment(tables, lay_out(tables, ShardingConfig()), None)
    for t, rank in enumerate((0, 0, 1, 1)):
        assignment.give(tables.whole(t), assignment.ranks[rank])
    assignment = even_out_lookups(assignment, ceiling_rows * 4)
    assert [r.lookup_load for r in assignment.ranks] == loads
    assert all(r.memory_bytes <= max(ceiling_rows, 200) * 4 for r in assignment.ranks)
    assert sorted(len(p.pieces) for p in assignment.placements) == [1, 1, 1, 1]


def _placed(tables_by_rank, budget_rows=None) -> Assignment:
    """An assignment of 1-column tables, given as {rank: [(name, rows, hotness), ...]}, placed whole."""
    named = [(rank, name, rows, hotness) for rank, owned in tables_by_rank.items() for name, rows, hotness in owned]
    tables = check_tables([TableConfig(name, rows, 1, hotness, multi_hot=True) for _, name, rows, hotness in named],
                          len(tables_by_rank), 4, 0)
    assignment = Assignment(tables, lay_out(tables, ShardingConfig()), None if budget_rows is None else budget_rows * 4)
    for t, (rank, *_) in enumerate(named):
        assignment.give(tables.whole(t), assignment.ranks[rank])
    return assignment


def test_of_two_swaps_that_even_the_lookups_alike_the_one_keeping_memory_even_is_taken():
    # a<->c and a<->d both leave lookups 5 and 5; a<->c leaves memory 400 / 200 rows, a<->d 300 / 300.
    assignment = _placed({0: [("a", 100, 4), ("b", 200, 4)], 1: [("c", 200, 1), ("d", 100, 1)]})
    evened = even_out_lookups(assignment, 1000 * 4)
    assert [r.lookup_load for r in evened.ranks] == [5, 5]
    assert [r.memory_bytes // 4 for r in evened.ranks] == [300, 300]
    assert sorted(evened.ranks[0].tables) == [1, 3]  # b and d


def test_a_gain_below_min_gain_leaves_the_assignment_as_it_was():
    # Swapping the 2-hot for the 1-hot table lowers the peak from 102 to 101: less than MIN_GAIN.
    assert 1 - 101 / 102 < MIN_GAIN
    assignment = _placed({0: [("a", 100, 100), ("b", 100, 2)], 1: [("c", 100, 100), ("d", 100, 1)]})
    assert even_out_lookups(assignment, 1000 * 4) is assignment


def test_the_memory_budget_caps_the_tolerance_lookups_may_use():
    # A swap of a 4-hot for a 1-hot table evens the lookups (8 / 3 -> 5 / 6) but takes the other rank from
    # 200 to 205 rows: inside the 5% tolerance over the mean, over a 202-row budget.
    owned = {0: [("a", 100, 4), ("b", 100, 4)], 1: [("c", 95, 1), ("d", 95, 1), ("e", 10, 1)]}
    assert [r.lookup_load for r in _lookups_evened(_placed(owned)).ranks] == [5, 6]
    capped = _lookups_evened(_placed(owned, budget_rows=202))
    assert [r.lookup_load for r in capped.ranks] == [8, 3]
    assert max(r.memory_bytes for r in capped.ranks) <= 202 * 4
