"""The planner's stages called alone: layout, each strategy, the row-slice fill, the plan's JSON form,
byte sizes, and the CLI flags it shares with main.py. Pure Python, no TensorFlow."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from dlrm.config import ShardingConfig
from dlrm.embedding.pieces import TablePiece
from dlrm.embedding.planner import Plan, PlanError, plan_embeddings
from dlrm.embedding.planner.cli import build_parser, print_plan
from dlrm.embedding.planner.layout import check_tables, even_ranges, lay_out
from dlrm.embedding.planner.strategies import (
    Assignment,
    check_strategy,
    fill_row_slices,
    place_basic,
    place_largest_first,
    place_memory_balanced,
    place_then_fill,
    water_level,
)
from dlrm.errors import UsageError
from dlrm.features import TableConfig, one_hot_tables
from dlrm.sizes import format_bytes, positive_byte_size


def _tables(rows, dim=2, world_size=2, slots=0, bytes_per_element=4):
    return check_tables(one_hot_tables(rows, dim), world_size, bytes_per_element, slots)


def _owners(assignment: Assignment) -> list:
    return [[owned.rank for owned in placement.pieces] for placement in assignment.placements]


# 4 bytes per element, dim 4: a row is 16 bytes. Budget 640 B (40 rows), columns above 176 B (11 rows),
# replicas up to 64 B (4 rows): one table of each kind.
FOUR_KINDS_ROWS = [50, 4, 12, 10]
FOUR_KINDS = ShardingConfig(rank_memory_bytes=40 * 16, column_slice_threshold_bytes=11 * 16,
                            replicate_threshold_bytes=4 * 16)


def test_layout_gives_each_table_its_kind_and_an_even_cut():
    layouts = lay_out(_tables(FOUR_KINDS_ROWS, dim=4), FOUR_KINDS)
    assert [layout.kind for layout in layouts] == ["row_sliced", "replicated", "column_sliced", "table_wise"]
    assert layouts[0].slices == [TablePiece(0, 0, 25, 0, 4), TablePiece(0, 25, 50, 0, 4)]
    assert layouts[1].slices == [TablePiece(1, 0, 4, 0, 4)]
    assert layouts[2].slices == [TablePiece(2, 0, 12, 0, 2), TablePiece(2, 0, 12, 2, 4)]
    assert layouts[3].slices == [TablePiece(3, 0, 10, 0, 4)]
    assert even_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]


def test_layout_keeps_every_table_whole_on_one_rank():
    tables = _tables([10, 20], world_size=1)
    cfg = ShardingConfig(rank_memory_bytes=8, column_slice_threshold_bytes=1, replicate_threshold_bytes=10**9)
    assert [layout.kind for layout in lay_out(tables, cfg)] == ["table_wise", "table_wise"]


def test_layout_names_a_table_too_big_for_all_ranks_together():
    tables = _tables([10, 100], dim=1, bytes_per_element=1)
    with pytest.raises(PlanError, match=r"table 'cat_1' \(100 rows x 1 cols, 100 B\) does not fit") as caught:
        lay_out(tables, ShardingConfig(rank_memory_bytes=40))
    assert caught.value.table == 1


@pytest.mark.parametrize("tables, world_size, message", [
    (one_hot_tables([10, 0], 2), 2, r"feature 'cat_1': the table needs at least one row \(cardinality 0\)"),
    (one_hot_tables([10], 0), 2, r"feature 'cat_0': the embedding dim must be >= 1, got 0"),
    ([TableConfig("a", 10, 2), TableConfig("a", 20, 2)], 2, r"categorical feature 'a' appears twice"),
    ([TableConfig("a", 10, 2, hotness=3)], 2, r"feature 'a': a one-hot feature has hotness 1, got 3"),
    (one_hot_tables([10], 2), 0, r"world_size must be positive \(got 0\)"),
])
def test_check_tables_refuses_sizes_no_plan_can_have(tables, world_size, message):
    with pytest.raises(ValueError, match=message):
        check_tables(tables, world_size, 4, 0)


def test_check_strategy_names_the_choices():
    assert check_strategy("basic") is place_basic
    with pytest.raises(ValueError, match=r"unknown sharding strategy 'nope'; choose one of \('basic', "):
        check_strategy("nope")


def _assign(strategy, rows, budget=None):
    tables = _tables(rows)
    return strategy(tables, lay_out(tables, ShardingConfig(rank_memory_bytes=budget)), budget)


def test_basic_deals_pieces_round_robin_whatever_their_size():
    assignment = _assign(place_basic, [10, 100, 10, 10])
    assert _owners(assignment) == [[0], [1], [0], [1]]
    assert [load.memory_bytes for load in assignment.ranks] == [160, 880]


def test_basic_skips_a_rank_without_room():
    # Rank 1 holds table 1 (640 B of a 700 B budget): table 2 goes to rank 0 although it is rank 1's turn.
    assignment = _assign(place_basic, [10, 80, 10], budget=700)
    assert _owners(assignment) == [[0], [1], [0]]


def test_memory_balanced_puts_the_largest_piece_first_and_fills_the_emptier_rank():
    tables = _tables([10, 100, 10, 10])
    layouts = lay_out(tables, ShardingConfig())
    assignment = Assignment(tables, layouts, None)
    place_largest_first(assignment, [layout.slices[0] for layout in layouts])
    assert _owners(assignment) == [[1], [0], [1], [1]]
    assert [load.memory_bytes for load in assignment.ranks] == [800, 240]


def test_memory_balanced_row_slices_only_the_tables_that_leave_the_ranks_uneven():
    # Table 1 (800 B of 1040 B) whole would leave one rank at 800 B against a mean of 520 B: row-sliced.
    sliced = _assign(place_memory_balanced, [10, 100, 10, 10])
    assert [p.kind for p in sliced.plan("memory_balanced").tables] == ["table_wise", "row_sliced"] + ["table_wise"] * 2
    assert [load.memory_bytes for load in sliced.ranks] == [520, 520]
    # 800 B and 720 B whole already lie within 5% of the mean (840 B): nothing is cut.
    whole = _assign(place_memory_balanced, [100, 90, 10, 10])
    assert {p.kind for p in whole.plan("memory_balanced").tables} == {"table_wise"}
    assert sorted(load.memory_bytes for load in whole.ranks) == [800, 880]


def test_memory_balanced_row_slices_a_table_to_fit_a_budget_whole_tables_cannot():
    # Three tables of 60 B on two ranks of 95 B: whole, the third fits nowhere; one cut in rows fits at 90 B each.
    tables = _tables([60, 60, 60], dim=1, bytes_per_element=1)
    plan = place_memory_balanced(tables, lay_out(tables, ShardingConfig(rank_memory_bytes=95)), 95).plan("m")
    assert [p.kind for p in plan.tables] == ["row_sliced", "table_wise", "table_wise"]
    assert [load.memory_bytes for load in plan.ranks] == [90, 90]
    with pytest.raises(PlanError, match="fits on no rank"):
        place_basic(tables, lay_out(tables, ShardingConfig(rank_memory_bytes=95)), 95)


def test_a_row_sliced_table_the_fill_puts_whole_on_one_rank_is_table_wise():
    # Table 0 (100 B) on rank 0; tables 1 and 2 (50 B each) to be cut fill rank 1 up to 100 B, each whole.
    tables = _tables([100, 50, 50], dim=1, bytes_per_element=1)
    layouts = [replace(layout, kind="row_sliced") if layout.table else layout
               for layout in lay_out(tables, ShardingConfig())]
    plan = place_then_fill(tables, layouts, None).plan("memory_balanced")
    assert [(p.kind, [owned.rank for owned in p.pieces]) for p in plan.tables] == [
        ("table_wise", [0]), ("table_wise", [1]), ("table_wise", [1])]


def test_a_piece_without_room_is_reported_with_the_shortfall():
    with pytest.raises(PlanError, match=r"table 'cat_2' \(40 rows x 2 cols\): a piece of 320 B fits on no rank; the "
                                        r"emptiest eligible rank has 10 B free of 330 B, short by 310 B"):
        _assign(place_basic, [40, 40, 40], budget=330)


def test_water_level_pours_onto_the_emptiest_ranks():
    assert water_level([0, 10, 30], 30) == 20
    assert water_level([5, 5], 10) == 10


def _filled(budget):
    """Table 0 (40 B) already on rank 0; table 1 (100 B, 1 B per row) is cut to even out the ranks."""
    tables = _tables([40, 100], dim=1, bytes_per_element=1)
    layouts = lay_out(tables, ShardingConfig(rank_memory_bytes=budget))
    assignment = Assignment(tables, layouts, budget)
    assignment.give(layouts[0].slices[0], assignment.ranks[0])
    fill_row_slices(assignment, [1])
    return assignment


def test_row_slices_fill_every_rank_to_one_level():
    assignment = _filled(budget=90)
    assert assignment.placements[1].pieces == [(1, TablePiece(1, 0, 70, 0, 1)), (0, TablePiece(1, 70, 100, 0, 1))]
    assert [load.memory_bytes for load in assignment.ranks] == [70, 70]


def test_row_slices_above_the_budget_name_the_table_and_the_shortfall():
    with pytest.raises(PlanError, match=r"table 'cat_1' \(100 rows x 1 cols\) and the other row-sliced tables do not "
                                        r"fit: spreading them evenly needs 70 B .* short by 10 B"):
        _filled(budget=60)


# A plan as the planner wrote it into meta.json before TablePiece became its piece type: checkpoints hold this.
SAVED_PLAN = {
    "world_size": 2, "dim": 4, "strategy": "memory_balanced", "bytes_per_element": 4, "optimizer_slots": 0,
    "tables": [
        {"table": 0, "rows": 50, "kind": "row_sliced", "pieces": [
            {"rank": 1, "row_start": 0, "row_end": 30, "col_start": 0, "col_end": 4},
            {"rank": 0, "row_start": 30, "row_end": 50, "col_start": 0, "col_end": 4}], "lookups_per_sample": 1.0},
        {"table": 1, "rows": 4, "kind": "replicated", "pieces": [
            {"rank": 0, "row_start": 0, "row_end": 4, "col_start": 0, "col_end": 4},
            {"rank": 1, "row_start": 0, "row_end": 4, "col_start": 0, "col_end": 4}], "lookups_per_sample": 1.0},
        {"table": 2, "rows": 12, "kind": "column_sliced", "pieces": [
            {"rank": 1, "row_start": 0, "row_end": 12, "col_start": 0, "col_end": 2},
            {"rank": 0, "row_start": 0, "row_end": 12, "col_start": 2, "col_end": 4}], "lookups_per_sample": 1.0},
        {"table": 3, "rows": 10, "kind": "table_wise", "pieces": [
            {"rank": 0, "row_start": 0, "row_end": 10, "col_start": 0, "col_end": 4}], "lookups_per_sample": 1.0}],
    "ranks": [{"rank": 0, "memory_bytes": 640, "lookup_load": 9.6, "tables": [0, 1, 2, 3]},
              {"rank": 1, "memory_bytes": 640, "lookup_load": 6.4, "tables": [0, 1, 2]}],
}


def _current_form(saved: dict) -> dict:
    """SAVED_PLAN as the planner writes it now: every table with its name, dim, hotness and combiner."""
    tables = [{**{k: v for k, v in t.items() if k != "lookups_per_sample"}, "name": f"cat_{t['table']}",
               "dim": saved["dim"], "hotness": 1, "combiner": "sum"} for t in saved["tables"]]
    return {**{k: v for k, v in saved.items() if k != "dim"}, "tables": tables}


def test_a_saved_plan_reads_back_and_the_planner_still_writes_it_alike():
    plan = Plan.from_dict(json.loads(json.dumps(SAVED_PLAN)))
    assert [(t.name, t.dim, t.hotness) for t in plan.tables] == [(f"cat_{i}", 4, 1) for i in range(4)]
    assert plan.to_dict() == _current_form(SAVED_PLAN)
    assert Plan.from_dict(plan.to_dict()) == plan
    assert plan.pieces_on_rank(1) == [TablePiece(0, 0, 30, 0, 4), TablePiece(1, 0, 4, 0, 4), TablePiece(2, 0, 12, 0, 2)]
    written = json.loads(plan_embeddings(one_hot_tables(FOUR_KINDS_ROWS, 4), 2, FOUR_KINDS).to_json())
    assert written == _current_form(SAVED_PLAN)


def test_byte_sizes_round_up_for_a_minimum_and_refuse_a_zero_budget():
    assert format_bytes(1024 * 1.001) == "1.00 KiB" and format_bytes(1024 * 1.001, round_up=True) == "1.01 KiB"
    assert format_bytes(999.5, round_up=True) == "1000 B"
    with pytest.raises(argparse.ArgumentTypeError, match="above 0"):
        positive_byte_size("0GiB")


def _printed_plan(capsys, *flags) -> dict:
    assert print_plan(["--table_rows", "1000,20,300", "--world_size", "2", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_planner_cli_takes_main_py_names_for_the_strategy_and_the_optimizer(capsys):
    adam = _printed_plan(capsys, "--optimizer", "adam", "--sharding_strategy", "basic")
    assert adam == _printed_plan(capsys, "--optimizer_slots", "2", "--sharding_strategy", "basic")
    assert adam["optimizer_slots"] == 2 and adam["strategy"] == "basic"
    assert _printed_plan(capsys, "--optimizer", "sgd")["optimizer_slots"] == 0


@pytest.mark.parametrize("flags, message", [
    (["--strategy", "basic"], "unrecognized arguments: --strategy"),
    (["--optimizer", "adam", "--optimizer_slots", "1"], "argument --optimizer_slots: not allowed with argument "
                                                        "--optimizer"),
    (["--optimizer", "lamb"], "argument --optimizer: invalid choice: 'lamb'"),
])
def test_planner_cli_refuses_the_old_flag_and_two_slot_counts(flags, message):
    with pytest.raises(UsageError, match=message):
        build_parser().parse_args(["--table_rows", "10", "--world_size", "2", *flags])
