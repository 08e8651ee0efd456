"""The all-to-all estimate against hand-computed cases, and the planner CLI that prints it for 8 ... 1024 ranks."""
from __future__ import annotations

import json

import pytest
import yaml

from dlrm.config import ShardingConfig
from dlrm.embedding.pieces import TablePiece
from dlrm.embedding.planner import OwnedPiece, Plan, RankLoad, TablePlacement, exchange_bytes, plan_embeddings
from dlrm.embedding.planner.cli import print_plan
from dlrm.errors import UsageError
from dlrm.features import TableConfig, one_hot_tables


def _placement(table, name, rows, dim, kind, owners, hotness=1, combiner="sum"):
    """`owners`: (rank, row_start, row_end, col_start, col_end) per piece."""
    pieces = [OwnedPiece(rank, TablePiece(table, *bounds)) for rank, *bounds in owners]
    return TablePlacement(table=table, name=name, rows=rows, dim=dim, kind=kind, pieces=pieces, hotness=hotness,
                          combiner=combiner)


def _plan(world_size, placements):
    return Plan(world_size=world_size, strategy="memory_balanced", bytes_per_element=4, optimizer_slots=0,
                tables=placements, ranks=[RankLoad(rank=r) for r in range(world_size)])


def _per_rank(estimate):
    return [(r.local_batch, r.forward_sent, r.forward_received, r.backward_sent, r.backward_received)
            for r in estimate.ranks]


def test_two_table_wise_tables_on_two_ranks():
    # 'a' (dim 4, one id) on rank 0, 'b' (dim 2, 3 ids) on rank 1; 3 rows per rank. Rank 0 sends rank 1
    # 3 x 3 ids of 'b' (36 B) and returns 3 vectors of 'a' (3 x 16 B); it receives 3 ids of 'a' (12 B) and
    # 3 vectors of 'b' (3 x 8 B). Backward: 3 gradients of 'b' out (24 B), 3 of 'a' in (48 B).
    plan = _plan(2, [_placement(0, "a", 10, 4, "table_wise", [(0, 0, 10, 0, 4)]),
                     _placement(1, "b", 10, 2, "table_wise", [(1, 0, 10, 0, 2)], hotness=3, combiner="mean")])
    estimate = exchange_bytes(plan, 6)
    assert _per_rank(estimate) == [(3, 84, 36, 24, 48), (3, 36, 84, 48, 24)]
    assert estimate.summary() == {"forward_max_bytes": 84, "forward_mean_bytes": 84, "backward_max_bytes": 48,
                                  "backward_mean_bytes": 48, "replicated_allgather_bytes": 0}


def _mixed_plan(combiner):
    """3 ranks: 'r' (dim 4, 2 ids) row-sliced over ranks 0 and 2; 'c' (dim 6) column-sliced, cols [0:2] on
    rank 1 and [2:6] on rank 2; 'p' (5 rows x 3) replicated."""
    return _plan(3, [
        _placement(0, "r", 9, 4, "row_sliced", [(0, 0, 5, 0, 4), (2, 5, 9, 0, 4)], hotness=2, combiner=combiner),
        _placement(1, "c", 8, 6, "column_sliced", [(1, 0, 8, 0, 2), (2, 0, 8, 2, 6)]),
        _placement(2, "p", 5, 3, "replicated", [(rank, 0, 5, 0, 3) for rank in range(3)])])


def test_row_sliced_mean_column_sliced_and_replicated_tables_on_three_ranks_and_an_uneven_batch():
    # Per batch row, requester <-> owner: a slice of 'r' takes 2 ids (8 B) and returns 4 floats (16 B, a
    # partial sum; the requester divides a mean by its own count); gradients 16 B. 'c' on rank 1 takes 1 id
    # (4 B), returns 2 floats (8 B); on rank 2 4 B, 16 B. Rows per rank 3, 2, 2. Rank 0 owns (8, 16, 16),
    # rank 1 (4, 8, 8), rank 2 (12, 32, 32); all (24, 56, 56).
    # Rank 0: sends 3 x (24 - 8) ids + 4 x 16 returned = 112, receives 4 x 8 + 3 x (56 - 16) = 152;
    # backward sends 3 x (56 - 16) = 120 and receives 4 x 16 = 64. Ranks 1 and 2 alike.
    estimate = exchange_bytes(_mixed_plan("mean"), 7)
    assert _per_rank(estimate) == [(3, 112, 152, 120, 64), (2, 80, 116, 96, 40), (2, 184, 108, 48, 160)]
    summary = estimate.summary()
    assert (summary["forward_max_bytes"], summary["backward_max_bytes"]) == (184, 160)
    assert summary["forward_mean_bytes"] == pytest.approx((152 + 116 + 184) / 3)
    assert summary["backward_mean_bytes"] == pytest.approx((120 + 96 + 160) / 3)
    # Replicated 'p' (dim 3, one id per row): its sparse gradient rows (12 B + an 8 B index) of the other
    # ranks' rows are allgathered; the ranks with 2 rows receive 5 rows' worth, 100 B.
    assert summary["replicated_allgather_bytes"] == 100
    for phase in ("forward", "backward"):  # every byte sent is received
        assert (sum(getattr(r, f"{phase}_sent") for r in estimate.ranks)
                == sum(getattr(r, f"{phase}_received") for r in estimate.ranks))


def test_the_mean_of_a_row_sliced_table_moves_no_more_bytes_than_the_sum():
    """The requester counts a bag's ids itself, so a mean over row slices sends no count column."""
    mean, total = exchange_bytes(_mixed_plan("mean"), 7), exchange_bytes(_mixed_plan("sum"), 7)
    assert _per_rank(mean) == _per_rank(total)


def test_one_rank_exchanges_nothing():
    plan = plan_embeddings(one_hot_tables([100, 20], 8), 1)
    estimate = exchange_bytes(plan, 512)
    assert _per_rank(estimate) == [(512, 0, 0, 0, 0)] and estimate.replicated_allgather_bytes == 0


def test_replicated_tables_send_nothing_by_all_to_all():
    plan = plan_embeddings(one_hot_tables([4, 3], 8), 4, ShardingConfig(replicate_threshold_bytes=10**6))
    estimate = exchange_bytes(plan, 64)
    assert {(r.forward_bytes, r.backward_bytes) for r in estimate.ranks} == {(0, 0)}
    # 16 rows per rank; each receives the other 48 rows' gradient rows of both tables: 2 x (8 x 4 + 8) B each.
    assert estimate.replicated_allgather_bytes == 48 * 2 * (8 * 4 + 8)


def _json_out(capsys, *flags) -> dict:
    assert print_plan(["--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_prints_the_estimate_for_8_to_1024_ranks(capsys):
    flags = ["--table_rows", "100000,3000,40", "--embedding_dims", "16,8,4", "--hotness", "3,1,2",
             "--global_batch_size", "4096"]
    out = _json_out(capsys, *flags, "--world_size", "2")
    tables = [TableConfig("cat_0", 100000, 16, 3, multi_hot=True), TableConfig("cat_1", 3000, 8),
              TableConfig("cat_2", 40, 4, 2, multi_hot=True)]
    plan = plan_embeddings(tables, 2)
    assert out["plan"] == plan.to_dict()
    assert out["exchange"] == exchange_bytes(plan, 4096).summary()
    scaling = out["scaling"]
    assert [row["world_size"] for row in scaling] == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert scaling[0]["exchange"] == exchange_bytes(plan_embeddings(tables, 8), 4096).summary()
    assert all(row["memory_max_over_mean"] <= 1.05 for row in scaling[:5])  # 40 rows cannot feed 1024 ranks
    assert print_plan(flags) == 0
    text = capsys.readouterr().out
    assert "global batch 4,096" in text and "fwd max" in text
    assert [line.split()[0] for line in text.splitlines()[2:]] == [str(2**k) for k in range(3, 11)]


def test_cli_names_a_scaling_row_that_does_not_fit(capsys):
    # 100,000 rows x 4 x 4 B = 1.6 MB: 195.32 KiB per rank on 8 ranks, over the 100 KiB budget; 16 ranks fit.
    assert print_plan(["--table_rows", "100000", "--embedding_dim", "4", "--rank_memory", "100KiB",
                       "--global_batch_size", "64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "     8 does not fit: needs 195.32 KiB per rank"
    assert lines[3].split()[:3] == ["16", "97.66", "KiB"]


def test_cli_reads_dims_hotness_and_combiners_from_a_feature_spec(tmp_path, capsys):
    spec = {"feature_spec": {"label": {"dtype": "bool"}, "c0": {"dtype": "int32", "cardinality": 5000},
                             "c1": {"dtype": "int16", "cardinality": 300, "embedding_dim": 8, "combiner": "mean"}},
            "channel_spec": {"label": ["label"], "numerical": [], "categorical": ["c0", "c1"]},
            "source_spec": {"train": [{"type": "split_binary", "features": [name], "files": [f"train/{name}.bin"]}
                                      for name in ("label", "c0", "c1")]}}
    (tmp_path / "feature_spec.yaml").write_text(yaml.safe_dump(spec))
    plan = _json_out(capsys, "--feature_spec", str(tmp_path), "--world_size", "2", "--embedding_dim", "32")
    assert [(t["name"], t["rows"], t["dim"], t["combiner"]) for t in plan["tables"]] == [
        ("c0", 5000, 32, "sum"), ("c1", 300, 8, "mean")]
    hot = _json_out(capsys, "--feature_spec", str(tmp_path), "--world_size", "2", "--hotness", "1,4")
    assert [t["hotness"] for t in hot["tables"]] == [1, 4]


@pytest.mark.parametrize("model_type, expected", [
    ("wide_n_deep", [("cat_0", 5000, 16), ("cat_1", 300, 16), ("cat_0_wide", 5000, 1), ("cat_1_wide", 300, 1)]),
    ("deep", [("cat_0", 5000, 16), ("cat_1", 300, 16)]),
    ("wide", [("cat_0_wide", 5000, 1), ("cat_1_wide", 300, 1)]),
])
def test_cli_plans_the_wide_and_deep_tables_the_trainer_builds(capsys, model_type, expected):
    plan = _json_out(capsys, "--table_rows", "5000,300", "--embedding_dim", "16", "--world_size", "2",
                     "--arch", "widedeep", "--model_type", model_type)
    assert sorted((t["name"], t["rows"], t["dim"]) for t in plan["tables"]) == sorted(expected)


def test_cli_plans_the_cross_tables_of_the_wide_part(capsys):
    plan = _json_out(capsys, "--table_rows", "50,300,7", "--world_size", "2", "--arch", "widedeep",
                     "--wide_crosses", "cat_0:cat_1,cat_0:cat_2", "--wide_cross_buckets", "1000")
    rows = {t["name"]: (t["rows"], t["dim"]) for t in plan["tables"]}
    assert rows["cat_0_x_cat_1_wide"] == (1000, 1)  # 50 x 300 pairs do not fit in 1000 rows: hashed
    assert rows["cat_0_x_cat_2_wide"] == (50 * 7, 1)  # they fit: one row per pair
    assert len(rows) == 3 + 3 + 2


@pytest.mark.parametrize("flags, message", [
    (["--wide_crosses", "cat_0:cat_9"], "the dataset has no categorical feature 'cat_9'"),
    (["--arch", "dlrm", "--wide_crosses", "cat_0:cat_1"],
     "argument --wide_crosses: not used by --arch dlrm \\(it applies to --arch widedeep\\)"),
    (["--arch", "dlrm", "--model_type", "wide"], "argument --model_type: not used by --arch dlrm"),
    (["--arch", "dcnv2", "--wide_cross_buckets", "9"], "argument --wide_cross_buckets: not used by --arch dcnv2"),
    (["--model_type", "deep", "--wide_crosses", "cat_0:cat_1"],
     "argument --wide_crosses: not used by --model_type deep \\(it applies to --model_type wide and wide_n_deep\\)"),
    (["--no_reserve_zero"], "argument --no_reserve_zero: applies to --preset sizes only"),
    (["--wide_cross_buckets", "9"], "argument --wide_cross_buckets: sizes the tables of --wide_crosses"),
    (["--embedding_dim", "8", "--embedding_dims", "8,8"], "argument --embedding_dim: not used with --embedding_dims"),
])
def test_cli_refuses_crosses_it_cannot_build(flags, message):
    with pytest.raises(UsageError, match=message):
        print_plan(["--table_rows", "10,20", "--world_size", "2", "--arch", "widedeep", *flags])


@pytest.mark.parametrize("flags, message", [
    (["--hotness", "1,2"], "argument --hotness: 2 value\\(s\\) given for 3 tables"),
    (["--embedding_dims", "8"], "argument --embedding_dims: 1 value\\(s\\) given for 3 tables"),
    ([], "give --world_size \\(a plan\\), --global_batch_size \\(the scaling table\\), or both"),
])
def test_cli_refuses_per_table_lists_of_the_wrong_length(flags, message):
    with pytest.raises(UsageError, match=message):
        print_plan(["--table_rows", "10,20,30", *flags] + (["--world_size", "2"] if flags else []))


def test_cli_plans_the_mlperf_preset_with_its_multi_hot_hotness(capsys):
    from dlrm.data.synthetic.criteo import MLPERF_HOTNESS

    out = _json_out(capsys, "--preset", "mlperf", "--world_size", "8", "--global_batch_size", "65536")
    hotness = {table["name"]: table["hotness"] for table in out["plan"]["tables"]}
    assert hotness == {f"cat_{i}": h for i, h in enumerate(MLPERF_HOTNESS)} and hotness["cat_20"] == 100
    order = [table["hotness"] > 1 for table in out["plan"]["tables"]]
    assert order == sorted(order), "the contract lists the one-hot tables first, as the generator writes them"
    assert max(table["rows"] for table in out["plan"]["tables"]) == 40_000_000
    one_hot = _json_out(capsys, "--preset", "t0", "--world_size", "8", "--global_batch_size", "65536")
    assert out["exchange"]["forward_max_bytes"] > one_hot["exchange"]["forward_max_bytes"]  # bags send more ids


def test_cli_refuses_a_bad_feature_spec_with_one_message(tmp_path):
    """A multi-hot feature without max_hotness used to end in a KeyError traceback."""
    import subprocess
    import sys

    from tests.support import ROOT

    spec = {"feature_spec": {"label": {"dtype": "bool"}, "bag": {"dtype": "int32", "cardinality": 50}},
            "channel_spec": {"label": ["label"], "multihot_categorical": ["bag"]},
            "source_spec": {"train": [{"type": "split_binary", "features": [name], "files": [f"train/{name}.bin"]}
                                      for name in ("label", "bag")]}}
    (tmp_path / "feature_spec.yaml").write_text(yaml.safe_dump(spec))
    done = subprocess.run([sys.executable, "-m", "dlrm.embedding.planner", "--feature_spec", str(tmp_path),
                           "--world_size", "2"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "'bag'" in done.stderr and "max_hotness" in done.stderr, done.stderr

