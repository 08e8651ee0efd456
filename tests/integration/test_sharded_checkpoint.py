"""Sharded checkpoints restore onto another world size: save with 3 ranks, restore with 2 and with 1, and 3 -> 2 -> 1.

The 3-rank Adagrad run of tests/integration/test_hybrid_parallel.py writes its final checkpoint (step 4) with
each rank writing only its own pieces (replicated tables by rank 0). That checkpoint is resumed by a
2-rank `main.py` launch (the stack's backend) and by one process (LocalEmbedding), each training one more
step. Both must equal an uninterrupted one-process run of 5 steps: weights, Adagrad accumulators, the step-5
loss. A wrong region, slot or optimizer step in the restore would break that equality. The 3-rank launch and
the one-process reference are shared (memoised, tests/support/hybrid.py) with test_hybrid_parallel.py; the
2-rank resume (only the resume: no other training in its launch) by the two tests that read it.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from tests.support.hybrid import (
    STEPS,
    TOLERANCE,
    checkpoint_arrays,
    losses,
    max_difference,
    reference,
    reshard_to_one_process,
    restore_flags,
    shared_dataset,
)
from tests.support.multirank import run_ranks, scratch_dir


@pytest.fixture(scope="module")
def two_rank_restore(three_rank_checkpoint) -> str:
    """2 ranks resume the 3-rank checkpoint and train one more step (`main.py`, nothing else in the launch);
    returns the base directory of its `restored` run and checkpoint."""
    base = scratch_dir("restored2_")
    out = os.path.join(base, "restored")
    flags = restore_flags(shared_dataset(), three_rank_checkpoint, out + "/run", out + "/ckpt")
    run_ranks(2, ["main.py", *flags], timeout=600).check()
    return base


def _piece_files(checkpoint_dir: str) -> list:
    found = []
    for folder, _, files in os.walk(os.path.join(checkpoint_dir, "embedding")):
        found += [os.path.join(os.path.relpath(folder, checkpoint_dir), f) for f in files]
    return sorted(found)


@pytest.mark.multirank
@pytest.mark.slow
def test_three_rank_checkpoint_is_written_in_pieces_with_the_plan(three_rank_checkpoint):
    from dlrm.train import checkpoint

    directory = checkpoint.find_checkpoint(three_rank_checkpoint)
    meta = checkpoint.read_meta(directory)
    assert meta["world_size"] == 3 and meta["step"] == STEPS
    plan = meta["plan"]
    assert plan["world_size"] == 3
    files = _piece_files(directory)
    # The row-sliced cat_0 is stored as several row ranges, the column-sliced cat_1 as columns.
    table0 = [f for f in files if f.startswith("embedding/cat_0/value/")]
    table1 = [f for f in files if f.startswith("embedding/cat_1/value/")]
    placements = {t["name"]: t for t in plan["tables"]}
    assert len(table0) == len(placements["cat_0"]["pieces"]) >= 2, table0
    assert len(table1) == len(placements["cat_1"]["pieces"]) >= 2, table1
    assert all("_c0-8.npy" in f for f in table0) and not any(f.endswith("_c0-8.npy") for f in table1)
    # Adagrad accumulators are stored next to every piece with the same shapes.
    assert len([f for f in files if "/accumulator/" in f]) == len([f for f in files if "/value/" in f])
    assert not any(name.endswith(".tmp") for name in os.listdir(os.path.dirname(directory)))


@pytest.mark.multirank
@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 1])
def test_restore_three_rank_checkpoint_on_other_world_sizes(world, three_rank_checkpoint, request):
    ref_run, ref_base = reference(restore_from=three_rank_checkpoint)
    ref_run.check()
    # world 1: the one-process worker resumed the checkpoint as well
    base = ref_base if world == 1 else request.getfixturevalue("two_rank_restore")
    want = checkpoint_arrays(os.path.join(ref_base, "continued", "ckpt"))
    got = checkpoint_arrays(os.path.join(base, "restored", "ckpt"))
    assert int(got["meta/world_size"]) == world
    assert int(got["meta/step"]) == int(want["meta/step"]) == STEPS + 1
    err, key = max_difference(got, want)
    assert err < TOLERANCE, f"restored on {world} rank(s) and trained a step: {key} differs by {err}"
    assert any(k.endswith("/accumulator") for k in got)
    # The resumed run logged only step 5; its loss equals the uninterrupted run's step-5 loss.
    resumed = losses(os.path.join(base, "restored", "run"))
    uninterrupted = losses(os.path.join(ref_base, "continued", "run"))
    assert len(uninterrupted) == STEPS + 1 and len(resumed) == 1
    np.testing.assert_allclose(resumed[-1], uninterrupted[-1], rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.multirank
@pytest.mark.slow
def test_a_multi_hot_checkpoint_reshards_from_three_to_two_to_one_rank(two_rank_restore):
    """3 ranks write, 2 ranks resume and write, 1 process resumes that: equal to 6 uninterrupted steps."""
    from dlrm.train import checkpoint

    two_rank = os.path.join(two_rank_restore, "restored", "ckpt")
    assert checkpoint.read_meta(checkpoint.find_checkpoint(two_rank))["world_size"] == 2
    resumed, uninterrupted = reshard_to_one_process(two_rank)
    got, want = checkpoint_arrays(resumed + "/ckpt"), checkpoint_arrays(uninterrupted + "/ckpt")
    assert int(got["meta/step"]) == int(want["meta/step"]) == STEPS + 2
    err, key = max_difference(got, want)
    assert err < TOLERANCE, f"resharded 3 -> 2 -> 1 and trained: {key} differs by {err}"
    assert any(name.startswith("embedding/cat_0/") for name in got)  # the row-sliced multi-hot table
    resumed_losses, uninterrupted_losses = losses(resumed + "/run"), losses(uninterrupted + "/run")
    assert len(resumed_losses) == 1 and len(uninterrupted_losses) == STEPS + 2
    np.testing.assert_allclose(resumed_losses[-1], uninterrupted_losses[-1], rtol=TOLERANCE, atol=TOLERANCE)
