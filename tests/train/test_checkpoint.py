"""Checkpoint layout, round trip, re-slicing on restore, atomicity and refusal of mismatched models."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from dlrm.checkpoint_layout import recorded_config
from dlrm.dist import single_process
from dlrm.embedding.base import TablePiece
from dlrm.train import checkpoint as ckpt
from dlrm.train.checkpoint import CheckpointError
from tests.support.damage import as_format_2

SINGLE = single_process()  # a world of one, without Horovod

NAMES = ["cat_0", "cat_1"]
SHAPE = {"num_numerical": 13, "tables": [{"name": name, "rows": rows, "dim": 4, "hotness": 1, "combiner": "sum"}
                                         for name, rows in zip(NAMES, [10, 7])]}
ONE_PROCESS = {"group": SINGLE, "table_names": NAMES}


def _tables(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((10, 4)).astype(np.float32), rng.standard_normal((7, 4)).astype(np.float32)]


def _pieces(arrays_by_slot, layout):
    """Variables for `layout` (list of TablePiece) cut out of full tables, one per slot."""
    out = []
    for piece in layout:
        slots = {slot: tf.Variable(tables[piece.table][piece.row_start:piece.row_end, piece.col_start:piece.col_end])
                 for slot, tables in arrays_by_slot.items()}
        out.append((piece, slots))
    return out


def _zero_pieces(slots, layout):
    return [(piece, {slot: tf.Variable(np.zeros(piece.shape, np.float32)) for slot in slots}) for piece in layout]


WHOLE = [TablePiece(0, 0, 10, 0, 4), TablePiece(1, 0, 7, 0, 4)]
SLICED = [TablePiece(0, 0, 3, 0, 2), TablePiece(0, 0, 3, 2, 4), TablePiece(0, 3, 10, 0, 4),
          TablePiece(1, 0, 4, 0, 4), TablePiece(1, 4, 7, 0, 4)]
OTHER = [TablePiece(0, 0, 5, 0, 4), TablePiece(0, 5, 10, 0, 1), TablePiece(0, 5, 10, 1, 4),
         TablePiece(1, 0, 7, 0, 3), TablePiece(1, 0, 7, 3, 4)]


def _dense(seed):
    rng = np.random.default_rng(seed)
    return {"d000_kernel": tf.Variable(rng.standard_normal((3, 5)).astype(np.float32)),
            "d000_kernel.m": tf.Variable(rng.standard_normal((3, 5)).astype(np.float32)),
            "optimizer_iterations": tf.Variable(np.int64(17))}


def _save(root, step, dense, pieces, keep=3, **meta):
    meta = dict({"model_shape": SHAPE, "reader": {"epoch": 0, "batch": step}}, **meta)
    return ckpt.save_checkpoint(root, step, dense, pieces, meta, keep=keep, **ONE_PROCESS)


def test_round_trip_restores_everything(tmp_path):
    values, accum = _tables(1), _tables(2)
    dense = _dense(3)
    path = _save(str(tmp_path), 100, dense, _pieces({"value": values, "accumulator": accum}, WHOLE),
                 reader={"epoch": 1, "batch": 42}, seed=5)
    assert open(tmp_path / "latest").read().strip() == "step_00000100"
    assert os.path.isfile(tmp_path / "step_00000100/embedding/cat_1/accumulator/r0-7_c0-4.npy")

    fresh_dense = {k: tf.Variable(tf.zeros_like(v)) for k, v in dense.items()}
    fresh = _zero_pieces(["value", "accumulator"], WHOLE)
    meta = ckpt.restore_checkpoint(ckpt.find_checkpoint(str(tmp_path)), fresh_dense, fresh, model_shape=SHAPE,
                                   **ONE_PROCESS)
    assert ckpt.find_checkpoint(str(tmp_path)) == path
    assert (meta["step"], meta["reader"], meta["seed"]) == (100, {"epoch": 1, "batch": 42}, 5)
    for key in dense:
        np.testing.assert_array_equal(fresh_dense[key].numpy(), dense[key].numpy())
    for piece, slots in fresh:
        np.testing.assert_array_equal(slots["value"].numpy(), values[piece.table])
        np.testing.assert_array_equal(slots["accumulator"].numpy(), accum[piece.table])


@pytest.mark.parametrize("saved_layout, restored_layout", [(WHOLE, WHOLE), (WHOLE, SLICED), (SLICED, OTHER)])
def test_big_pieces_save_and_restore_in_row_chunks(tmp_path, monkeypatch, saved_layout, restored_layout):
    """Pieces taller than the chunk are written and read back a few rows at a time (bounded host
    memory), bit-exactly, also when the restored plan cuts the table differently."""
    monkeypatch.setattr(ckpt.files, "_CHUNK_ROWS", 3)  # tables of 10 and 7 rows: chunks 3, 3, 3, 1 / 3, 3, 1
    values, accum = _tables(6), _tables(7)
    _save(str(tmp_path), 1, {}, _pieces({"value": values, "accumulator": accum}, saved_layout))
    fresh = _zero_pieces(["value", "accumulator"], restored_layout)
    ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, fresh, **ONE_PROCESS)
    for piece, slots in fresh:
        rows, cols = slice(piece.row_start, piece.row_end), slice(piece.col_start, piece.col_end)
        np.testing.assert_array_equal(slots["value"].numpy(), values[piece.table][rows, cols])
        np.testing.assert_array_equal(slots["accumulator"].numpy(), accum[piece.table][rows, cols])


@pytest.mark.parametrize("saved_layout, restored_layout", [(WHOLE, SLICED), (SLICED, WHOLE), (SLICED, OTHER)])
def test_restore_reslices_pieces_for_another_plan(tmp_path, saved_layout, restored_layout):
    values = _tables(4)
    _save(str(tmp_path), 1, {}, _pieces({"value": values}, saved_layout))
    fresh = _zero_pieces(["value"], restored_layout)
    ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, fresh, **ONE_PROCESS)
    for piece, slots in fresh:
        expected = values[piece.table][piece.row_start:piece.row_end, piece.col_start:piece.col_end]
        np.testing.assert_array_equal(slots["value"].numpy(), expected)


def test_read_region_refuses_an_uncovered_region(tmp_path):
    values = _tables(5)
    _save(str(tmp_path), 1, {}, _pieces({"value": values}, SLICED))
    os.remove(tmp_path / "step_00000001/embedding/cat_1/value/r4-7_c0-4.npy")
    with pytest.raises(CheckpointError, match=r"step_00000001/embedding/cat_1/value/r4-7_c0-4\.npy \(table 'cat_1', "
                                              r"slot 'value', piece r4-7_c0-4\) cannot be read: No such file"):
        ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, _zero_pieces(["value"], WHOLE), **ONE_PROCESS)
    as_format_2(str(tmp_path / "step_00000001"))  # no manifest to list the file: the pieces do not cover the table
    with pytest.raises(CheckpointError, match="cover 16 of the 28 cells"):
        ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, _zero_pieces(["value"], WHOLE), **ONE_PROCESS)


def test_leftover_tmp_dir_and_torn_latest_are_never_loaded(tmp_path):
    root = str(tmp_path)
    _save(root, 10, _dense(1), _pieces({"value": _tables(1)}, WHOLE))
    # a later save killed half way: its directory still has the .tmp suffix (even with a meta.json)
    os.makedirs(tmp_path / "step_00000020.tmp/dense")
    (tmp_path / "step_00000020.tmp/meta.json").write_text("{}")
    assert ckpt.find_checkpoint(root).endswith("step_00000010")
    for torn in ["", "step_000", "step_00000020", "step_00000020.tmp", "../../etc"]:
        (tmp_path / "latest").write_text(torn)
        assert ckpt.find_checkpoint(root).endswith("step_00000010"), torn
    (tmp_path / "latest").unlink()
    assert ckpt.find_checkpoint(root).endswith("step_00000010")
    assert ckpt.find_checkpoint(str(tmp_path / "step_00000020.tmp")) is None
    # the next save of that step clears the leftover and completes normally
    _save(root, 20, _dense(2), _pieces({"value": _tables(2)}, WHOLE))
    assert ckpt.find_checkpoint(root).endswith("step_00000020")
    assert not os.path.exists(tmp_path / "step_00000020.tmp")


def test_failure_while_writing_leaves_previous_checkpoint_current(tmp_path):
    root = str(tmp_path)
    first = _tables(1)
    _save(root, 10, {}, _pieces({"value": first}, WHOLE))

    class Exploding:
        shape = (7, 4)

        def numpy(self):
            raise OSError("disk full")

    broken = _pieces({"value": _tables(2)}, WHOLE[:1]) + [(WHOLE[1], {"value": Exploding()})]
    with pytest.raises(CheckpointError, match="cannot write checkpoint .*step_00000020: disk full"):
        _save(root, 20, {}, broken)
    assert open(tmp_path / "latest").read().strip() == "step_00000010"
    assert ckpt.complete_checkpoints(root) == ["step_00000010"]
    assert sorted(os.listdir(root)) == ["latest", "step_00000010"]  # no step_00000020.tmp left behind
    fresh = _zero_pieces(["value"], WHOLE)
    ckpt.restore_checkpoint(ckpt.find_checkpoint(root), {}, fresh, **ONE_PROCESS)
    np.testing.assert_array_equal(fresh[0][1]["value"].numpy(), first[0])


def test_keeps_only_the_last_k(tmp_path):
    for step in (1, 2, 3, 4, 5):
        _save(str(tmp_path), step, {}, _pieces({"value": _tables(step)}, WHOLE), keep=2)
    assert ckpt.complete_checkpoints(str(tmp_path)) == ["step_00000004", "step_00000005"]


def test_refuses_a_checkpoint_for_another_model(tmp_path):
    _save(str(tmp_path), 1, _dense(1), _pieces({"value": _tables(1)}, WHOLE))
    path = ckpt.find_checkpoint(str(tmp_path))
    other_shape = dict(SHAPE, tables=[SHAPE["tables"][0], dict(SHAPE["tables"][1], rows=8)])
    with pytest.raises(CheckpointError, match="table 'cat_1' has rows 7 there and 8 here"):
        ckpt.restore_checkpoint(path, _dense(1), _zero_pieces(["value"], WHOLE), model_shape=other_shape, **ONE_PROCESS)
    wrong_dense = dict(_dense(1), d000_kernel=tf.Variable(np.zeros((3, 6), np.float32)))
    with pytest.raises(CheckpointError, match="'d000_kernel' has shape"):
        ckpt.restore_checkpoint(path, wrong_dense, _zero_pieces(["value"], WHOLE), model_shape=SHAPE, **ONE_PROCESS)
    with pytest.raises(CheckpointError, match="no slot 'accumulator'"):
        ckpt.restore_checkpoint(path, _dense(1), _zero_pieces(["value", "accumulator"], WHOLE), **ONE_PROCESS)
    # evaluation asks for weights only: the optimizer slot in the checkpoint is not an error then
    ckpt.restore_checkpoint(path, {"d000_kernel": tf.Variable(np.zeros((3, 5), np.float32))},
                            _zero_pieces(["value"], WHOLE), strict=False, **ONE_PROCESS)


def test_pickled_arrays_are_refused(tmp_path):
    _save(str(tmp_path), 1, {}, _pieces({"value": _tables(1)}, WHOLE))
    target = tmp_path / "step_00000001/embedding/cat_0/value/r0-10_c0-4.npy"
    np.save(target, np.array([{"evil": 1}] * 10, dtype=object).reshape(10, 1), allow_pickle=True)
    with pytest.raises(CheckpointError, match=r"r0-10_c0-4\.npy \(table 'cat_0', slot 'value', piece r0-10_c0-4\) has "
                                              r"\d+ bytes, the manifest says 288"):
        ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, _zero_pieces(["value"], WHOLE), **ONE_PROCESS)
    as_format_2(str(tmp_path / "step_00000001"))  # no manifest: the header alone refuses it, nothing is unpickled
    with pytest.raises(CheckpointError, match=r"r0-10_c0-4\.npy \(table 'cat_0', slot 'value', piece r0-10_c0-4\) is "
                                              r"not a plain numeric \.npy array \(it holds Python objects\)"):
        ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, _zero_pieces(["value"], WHOLE), **ONE_PROCESS)


def test_meta_is_plain_json(tmp_path):
    path = _save(str(tmp_path), 3, _dense(1), _pieces({"value": _tables(1)}, WHOLE))
    meta = json.loads(open(os.path.join(path, "meta.json")).read())
    assert meta["dense_shapes"] == {"d000_kernel": [3, 5], "d000_kernel.m": [3, 5], "optimizer_iterations": []}
    assert meta["model_shape"] == SHAPE and meta["step"] == 3


def test_any_feature_name_gets_a_safe_directory_of_its_own(tmp_path):
    names = ["a/b", ".."]
    assert [ckpt.table_dir_name(name) for name in names] == ["a%2Fb", "%2E."]
    values = _tables(8)
    ckpt.save_checkpoint(str(tmp_path), 1, {}, _pieces({"value": values}, WHOLE), {}, group=SINGLE,
                         table_names=names)
    assert sorted(os.listdir(tmp_path / "step_00000001/embedding")) == ["%2E.", "a%2Fb"]
    fresh = _zero_pieces(["value"], WHOLE)
    ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, fresh, group=SINGLE, table_names=names)
    for piece, slots in fresh:
        np.testing.assert_array_equal(slots["value"].numpy(), values[piece.table])
    with pytest.raises(CheckpointError, match=r"has no table 'c' \(its tables: \['a/b', '..'\]\)"):
        ckpt.restore_checkpoint(str(tmp_path / "step_00000001"), {}, fresh, group=SINGLE, table_names=["a/b", "c"])


@pytest.mark.parametrize("model, problem", [
    ({"top_mlp": 5}, "model.top_mlp is 5"),
    ({"embedding_dim": "x"}, "model.embedding_dim is 'x'"),
    ({"arch": "foo"}, "model arch must be one of ('dlrm', 'dcnv2', 'widedeep'), got 'foo'"),
    (7, "its configuration cannot be read"),
])
def test_a_recorded_configuration_this_version_cannot_use_is_damage(tmp_path, model, problem):
    """What eval, inference and export build the model from is checked before use, and named."""
    (tmp_path / "meta.json").write_text(json.dumps({"step": 1, "config": {"model": model}}))
    with pytest.raises(ckpt.CheckpointError) as refused:
        recorded_config(str(tmp_path))
    assert str(refused.value).startswith(f"checkpoint {tmp_path} is damaged: {tmp_path}/meta.json records a "
                                         f"configuration this version cannot use: {problem}")
    (tmp_path / "meta.json").write_text(json.dumps({"step": 1}))
    assert recorded_config(str(tmp_path)) is None  # not written by this trainer: the flags give the model
    (tmp_path / "meta.json").write_text(json.dumps({"step": 1, "config": {"model": {"arch": "dcnv2"}}}))
    assert recorded_config(str(tmp_path)).model.arch == "dcnv2"
