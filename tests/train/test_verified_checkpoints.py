"""Verified checkpoints: every kind of file (dense, embedding piece, optimizer slot, meta.json, manifest)
damaged in every way (a byte flipped, truncated, NaN) is refused before anything reads it, with one message
naming the file, for 1 rank here and for 2 real ranks (`tests/workers/checkpoint_dir.py`); checkpoints
without a manifest (format 2) still restore, checked for readable, finite arrays; a resuming run falls back
to its newest checkpoint that verifies; evaluation and export refuse a damaged one."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from dlrm.dist import single_process
from dlrm.embedding.base import TablePiece
from dlrm.train import checkpoint as ckpt
from dlrm.train.checkpoint import CheckpointError, verify
from tests.support import ROOT
from tests.support.damage import as_format_2, cases, damage
from tests.support.multirank import run_ranks, scratch_dir, worker_argv
from tests.support.runs import SMALL, SMALL_DATA, main_in_process

SINGLE = single_process()
NAMES = ["cat_0", "cat%1"]  # the second one's directory is escaped (cat%251): messages name the table itself
SHAPE = {"num_numerical": 13, "tables": [{"name": name, "rows": rows, "dim": 4, "hotness": 1, "combiner": "sum"}
                                         for name, rows in zip(NAMES, [10, 7])]}
LAYOUT = [TablePiece(0, 0, 10, 0, 4), TablePiece(1, 0, 4, 0, 4), TablePiece(1, 4, 7, 0, 4)]


def _variables(seed):
    rng = np.random.default_rng(seed)
    dense = {"d000_kernel": tf.Variable(rng.standard_normal((3, 5)).astype(np.float32)),
             "optimizer_iterations": tf.Variable(np.int64(17))}
    pieces = [(piece, {slot: tf.Variable(rng.standard_normal(piece.shape).astype(np.float32))
                       for slot in ("value", "accumulator")}) for piece in LAYOUT]
    return dense, pieces


def _save(root, step=1):
    dense, pieces = _variables(step)
    return ckpt.save_checkpoint(str(root), step, dense, pieces, {"model_shape": SHAPE}, group=SINGLE,
                                table_names=NAMES)


def _restore(path):
    dense, pieces = _variables(99)
    ckpt.restore_checkpoint(str(path), dense, pieces, model_shape=SHAPE, group=SINGLE, table_names=NAMES)
    return dense, pieces


def test_the_manifest_lists_every_file_with_its_size_and_crc32(tmp_path):
    import zlib

    path = _save(tmp_path)
    with open(os.path.join(path, ckpt.MANIFEST)) as f:
        files = json.load(f)["files"]
    on_disk = {os.path.relpath(os.path.join(parent, name), path) for parent, _, names in os.walk(path)
               for name in names} - {ckpt.MANIFEST}
    assert set(files) == on_disk and len(on_disk) == 2 + 2 * len(LAYOUT) + 1
    for relative, (size, crc) in files.items():
        data = open(os.path.join(path, relative), "rb").read()
        assert (len(data), f"{zlib.crc32(data):08x}") == (size, crc)


@pytest.mark.parametrize("kind,way", cases())
def test_each_kind_of_file_damaged_each_way_is_refused_naming_it(tmp_path, kind, way):
    path = _save(tmp_path)
    expected, _ = _restore(path)  # intact: restores
    damaged = damage(path, kind, way)
    with pytest.raises(CheckpointError) as refused:
        _restore(path)
    message = str(refused.value)
    assert message.startswith(f"checkpoint {path} is damaged: {damaged} ("), message
    if kind in ("piece", "slot"):
        assert f"table 'cat%1', slot '{'value' if kind == 'piece' else 'accumulator'}', piece r4-7_c0-4)" in message
    with pytest.raises(CheckpointError, match="is damaged"):  # reading a checkpoint whole verifies it too
        ckpt.read_arrays(path)


OLD_FORMAT_DAMAGE = [
    ("slot", "nan", r"accumulator/r4-7_c0-4\.npy \(table 'cat%1', slot 'accumulator', piece r4-7_c0-4\) holds NaN or "
                    r"infinite values"),
    ("piece", "truncated", r"value/r4-7_c0-4\.npy \(table 'cat%1', slot 'value', piece r4-7_c0-4\) is not a plain "
                           r"numeric \.npy array \(its header says \(3, 4\) float32, which is not the 4 bytes of data "
                           r"it holds: truncated\)"),
    ("dense", "truncated", r"d000_kernel\.npy \(dense variable 'd000_kernel'\) is not a plain numeric \.npy array "
                           r"\(its header says \(3, 5\) float32, which is not the 13 bytes of data it holds: "
                           r"truncated\)"),
]


def test_a_checkpoint_without_a_manifest_restores_and_is_checked_for_finite_complete_arrays(tmp_path):
    path = _save(tmp_path / "intact")
    as_format_2(path)
    dense, _ = _restore(path)
    np.testing.assert_array_equal(dense["d000_kernel"].numpy(), _variables(1)[0]["d000_kernel"].numpy())
    for kind, way, message in OLD_FORMAT_DAMAGE:
        path = _save(tmp_path / f"{kind}-{way}")
        as_format_2(path)
        damage(path, kind, way)
        with pytest.raises(CheckpointError, match=message):
            _restore(path)


def test_an_array_file_added_to_a_checkpoint_is_refused(tmp_path):
    """Restore finds pieces by listing directories: a stray piece would be read with the others."""
    path = _save(tmp_path)
    stray = os.path.join(path, "embedding", "cat%251", "value", "r0-7_c0-4.npy")
    np.save(stray, np.zeros((7, 4), np.float32))
    with pytest.raises(CheckpointError, match=r"r0-7_c0-4\.npy \(table 'cat%1', slot 'value', piece r0-7_c0-4\) is "
                                              r"not listed in the manifest"):
        _restore(path)


def test_a_checkpoint_whose_meta_says_it_has_a_manifest_is_refused_without_it(tmp_path):
    path = _save(tmp_path)
    os.remove(os.path.join(path, ckpt.MANIFEST))
    with pytest.raises(CheckpointError, match=r"manifest\.json \(manifest\.json\) is missing \(meta\.json says "
                                              r"format 3\)"):
        _restore(path)


@pytest.mark.multirank
def test_two_ranks_refuse_every_damage_with_one_message_from_the_rank_that_read_the_file():
    root = scratch_dir("verify_ranks_")
    run = run_ranks(2, worker_argv("checkpoint_dir", "damage", root), timeout=180).check()
    outcomes = {rank: result["cases"] for rank, result in run.results.items()}
    assert sorted(outcomes) == [0, 1]
    for case in cases():
        key = "-".join(case)
        both = [outcomes[0][key], outcomes[1][key]]
        reporting = [o for o in both if o["outcome"] == "CheckpointError"]
        assert len(reporting) == 1 and [o["outcome"] for o in both].count("PeerRankFailed") == 1, (key, both)
        assert reporting[0]["message"].startswith("checkpoint ") and f" is damaged: {root}" in reporting[0]["message"]


def _main(args, timeout=180):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_resume_falls_back_to_the_newest_checkpoint_that_verifies_and_eval_and_export_refuse_a_damaged_one(
        tmp_path, capfd):
    common = ["--synthetic_dir", str(tmp_path / "data"), *SMALL, "--save_checkpoint_path",
              str(tmp_path / "ckpt"), "--run_dir", str(tmp_path / "run"), "--checkpoint_every", "3"]
    first = main_in_process(capfd, [*common, "--max_steps", "6"])
    assert first.returncode == 0, first.stderr[-3000:]
    newest = str(tmp_path / "ckpt" / "step_00000006")
    damaged = damage(newest, "piece", "flipped")

    evaluation = _main(["main.py", "--synthetic_dir", str(tmp_path / "data"), *SMALL_DATA, "--mode", "eval",
                        "--restore_checkpoint_path", str(tmp_path / "ckpt"), "--run_dir", str(tmp_path / "eval")])
    export = _main(["-m", "dlrm.export", "--checkpoint", str(tmp_path / "ckpt"), "--out", str(tmp_path / "model")])
    for refused in (evaluation, export):
        assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
        assert f"checkpoint {newest} is damaged: {damaged} (table " in refused.stderr, refused.stderr[-3000:]
    assert not os.path.exists(tmp_path / "model")

    resumed = main_in_process(capfd, [*common, "--max_steps", "9"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"checkpoint {newest} is damaged: {damaged}" in resumed.stdout
            and f"resuming from the next older checkpoint, {tmp_path / 'ckpt' / 'step_00000003'}" in resumed.stdout
            and "restored " + str(tmp_path / "ckpt" / "step_00000003") in resumed.stdout), resumed.stdout[-3000:]
    assert ckpt.find_checkpoint(str(tmp_path / "ckpt")).endswith("step_00000009")

    final = str(tmp_path / "ckpt" / "step_00000009")  # the final checkpoint damaged: rerun the finished run
    damage(final, "dense", "flipped")
    again = main_in_process(capfd, [*common, "--max_steps", "9"])
    assert again.returncode == 0 and "resuming from the next older checkpoint" in again.stdout, again.stderr[-3000:]
    assert ckpt.read_arrays(final)  # written again, not kept damaged because its directory existed


def test_ranks_share_the_files_by_size():
    """Each file is checked by exactly one rank, and the ranks read about as many bytes (within one file)."""
    sizes = {"embedding/big/value/r0-9_c0-4.npy": 900, "dense/a.npy": 10, "dense/b.npy": 20, "meta.json": 5,
             "embedding/mid/value/r0-3_c0-4.npy": 400, "embedding/mid/m/r0-3_c0-4.npy": 400}
    for ranks in (1, 2, 3, 7):
        shares = verify.share_by_size(sizes, ranks)
        assert sorted(name for share in shares for name in share) == sorted(sizes)
        held = [sum(sizes[name] for name in share) for share in shares]
        assert max(held) - min(held) <= max(sizes.values())
    assert verify.share_by_size(sizes, 2) == [
        ["embedding/big/value/r0-9_c0-4.npy"],
        ["embedding/mid/m/r0-3_c0-4.npy", "embedding/mid/value/r0-3_c0-4.npy", "dense/b.npy", "dense/a.npy",
         "meta.json"]]
