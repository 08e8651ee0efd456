"""N ranks compute what 1 rank computes: the project's main correctness test (real processes).

One tiny DLRM whose 26 tables, one-hot and multi-hot, are planned into all four layouts at N = 2 and
N = 3 (multi-hot bags in each: cat_0 row-sliced with the mean combiner, cat_1 column-sliced, cat_2
replicated, cat_4 table-wise with the mean; the one-hot tables of <= 6 rows replicated, the rest whole) is
trained with
the trainer's real code path (`dlrm.train.run.run`: reader with per-rank slices, the real
`tf.function` step, optimizer, checkpoint writer) for one epoch of 23 rows at global batch 7 — batches
of 7, 7, 7 and a last one of 2 rows, so the per-rank batches are uneven and at N = 3 one rank gets no
rows at all. Per optimizer (SGD and sparse Adagrad) the per-step losses and the final weights (dense,
every table, Adagrad accumulators; read from the final checkpoints) must equal a one-process run
with the same global batch to float32 tolerance, with Gloo at N = 2 and 3, with Horovod's MPI controller at
N = 2, and with the MPI backend (mpi4py under plain mpirun) at N = 2 and 3. The Gloo and MPI-backend
launches also train Wide & Deep on the same tables (deep and dim-1 wide tables in one layer, FTRL + RMSprop,
dropout 0.1 whose masks are keyed by the dataset row), held to the same tolerance.

Each launch also runs the embedding-layer checks of tests/support/embedding_layer.py (initial
pieces, lookups and gradients vs `LocalEmbedding`) so that a multi-rank start-up is paid only once.
Launches (tests/support/hybrid.py, worker tests/workers/hybrid_parallel.py) are memoised per pytest
session and shared with tests/integration/test_sharded_checkpoint.py.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest

from tests.support.embedding_layer import assert_layer_results
from tests.support.hybrid import (
    CARDINALITIES,
    DIM,
    SEED,
    STEPS,
    TABLE_ORDER,
    TOLERANCE,
    WIDEDEEP,
    assert_same_bits,
    checkpoint_arrays,
    launch,
    launch_optimizers,
    losses,
    max_difference,
    reference,
    repro_run,
    repro_single,
    three_rank_checkpoint,
)


def assert_same_training(base: str, ref_base: str, world: int, optimizers: list) -> None:
    from dlrm.embedding.local import initial_table_values

    for optimizer in optimizers:
        got_losses = losses(os.path.join(base, optimizer, "run"))
        want_losses = losses(os.path.join(ref_base, optimizer, "run"))
        assert len(want_losses) == STEPS and len(got_losses) == STEPS, (got_losses, want_losses)
        np.testing.assert_allclose(got_losses, want_losses, rtol=TOLERANCE, atol=TOLERANCE,
                                   err_msg=f"{optimizer}: losses differ at N={world}")
        got = checkpoint_arrays(os.path.join(base, optimizer, "ckpt"))
        want = checkpoint_arrays(os.path.join(ref_base, optimizer, "ckpt"))
        assert int(got["meta/world_size"]) == world and int(want["meta/world_size"]) == 1
        assert int(got["meta/step"]) == int(want["meta/step"]) == STEPS
        err, key = max_difference(got, want)
        assert err < TOLERANCE, f"{optimizer}: final weights differ at N={world}: {key} by {err}"
        if optimizer == "adagrad":
            assert any(k.endswith("/accumulator") for k in want), sorted(want)[:10]
        if optimizer == WIDEDEEP:  # both parts trained: FTRL's slots on the wide tables, RMSprop's on the deep ones
            assert {"embedding/cat_0_wide/linear", "embedding/cat_0/rms"} <= set(want), sorted(want)[:10]
            assert np.any(want["embedding/cat_0_wide/value"])
            assert want["embedding/cat_8_x_cat_12_wide/value"].shape == (400, 1)
            for cross in ("cat_3_x_cat_5_wide", "cat_8_x_cat_12_wide"):
                assert np.any(want[f"embedding/{cross}/value"]), cross
        # The comparison is not between two untouched initialisations: the rows of table 0 looked up
        # in these steps moved, the others (most of its 1500) still hold exactly their initial values.
        initial = initial_table_values(TABLE_ORDER.index("cat_0"), CARDINALITIES[0], DIM, SEED,
                                       initializer="glorot_normal" if optimizer == WIDEDEEP else "uniform")
        unchanged = np.all(want["embedding/cat_0/value"] == initial, axis=1)
        assert unchanged.any() and not unchanged.all(), f"{optimizer}: {unchanged.sum()} rows of table 0 unchanged"


def assert_layer_checks(run, world: int) -> None:
    assert_layer_results([run.results[r]["layer"] for r in range(world)], world)


def assert_plan_has_every_kind(base: str, world: int) -> None:
    from dlrm.train import checkpoint

    meta = checkpoint.read_meta(checkpoint.find_checkpoint(os.path.join(base, "adagrad", "ckpt")))
    kinds = {t["name"]: t["kind"] for t in meta["plan"]["tables"]}
    assert meta["plan"]["world_size"] == world
    assert [t["name"] for t in meta["plan"]["tables"]] == TABLE_ORDER
    # A multi-hot bag in every layout, the mean over a row-sliced one included.
    assert kinds["cat_0"] == "row_sliced" and kinds["cat_1"] == "column_sliced", kinds
    assert kinds["cat_2"] == "replicated" and kinds["cat_4"] == "table_wise", kinds
    shape = {t["name"]: t for t in meta["model_shape"]["tables"]}
    assert (shape["cat_0"]["hotness"], shape["cat_0"]["combiner"]) == (3, "mean"), shape["cat_0"]
    assert {"table_wise", "replicated"} <= set(kinds.values()), kinds


# ------------------------------------------------------------------------------------ tests
# One horovodrun launch per (world size, controller), shared by both tests below; the 2-rank Gloo
# launch also restores the 3-rank checkpoint (world-size change).
# The MPI backend (mpi4py under plain mpirun) at 2 and 3 ranks beside Horovod's launches.
# The Horovod launches also run in CI's Horovod lane (both_stacks; tests/conftest.py).
EVERY_LAUNCH = pytest.mark.parametrize("world,mpi,backend", [
    pytest.param(3, False, "horovod", marks=pytest.mark.both_stacks, id="gloo-3"),
    pytest.param(2, False, "horovod", marks=pytest.mark.both_stacks, id="gloo-2"),
    pytest.param(2, True, "horovod", marks=pytest.mark.both_stacks, id="mpi-2"),
    pytest.param(3, False, "mpi", id="mpi4py-3"),
    pytest.param(2, False, "mpi", id="mpi4py-2")])


def checked_launch(world: int, mpi: bool, backend: str = "horovod"):
    restore = three_rank_checkpoint() if (world, mpi, backend) == (2, False, "horovod") else None
    run, base = launch(world, mpi, restore_from=restore, backend=backend)
    run.check()
    return run, base


@pytest.mark.multirank
@pytest.mark.slow
@EVERY_LAUNCH
def test_n_ranks_train_exactly_like_one_process(world, mpi, backend):
    run, base = checked_launch(world, mpi, backend)
    ref_run, ref_base = reference(restore_from=three_rank_checkpoint())
    ref_run.check()
    assert_plan_has_every_kind(base, world)
    assert_same_training(base, ref_base, world, launch_optimizers(mpi, backend, world))
    assert {run.results[r]["backend"] for r in range(world)} == {backend}


@pytest.mark.multirank
@pytest.mark.slow
@EVERY_LAUNCH
def test_embedding_layer_matches_local_embedding_in_the_same_launch(world, mpi, backend):
    run, _ = checked_launch(world, mpi, backend)
    assert_layer_checks(run, world)


@pytest.mark.multirank
@pytest.mark.slow
@pytest.mark.both_stacks
def test_progress_lines_reach_the_output_under_mpi():
    """mpirun hands each rank a pseudo-terminal and forwards it into a pipe: a redrawn bar never shows
    up as lines there, so rank 0 must print plain progress lines (one per step with --log_every 1)."""
    run, _ = checked_launch(2, mpi=True)
    progress = re.findall(r"^\[1,0\]<stdout>:step +(\d+) +epoch .* loss [0-9.]+ ", run.stdout, flags=re.MULTILINE)
    assert progress == [str(step) for step in range(1, STEPS + 1)], run.stdout[-3000:]


# Every allreduce alone in Horovod's buffer, or all of a step's tensors fused into one (a long cycle).
UNFUSED = {"HOROVOD_FUSION_THRESHOLD": "0"}
FUSED = {"HOROVOD_CYCLE_TIME": "20"}


@pytest.mark.multirank
@pytest.mark.slow
def test_three_ranks_stay_within_float_rounding_of_one_process_for_40_steps():
    """The 1-vs-N tolerance holds beyond the first steps too (docs/hybrid_parallel.md, "N ranks vs one process")."""
    three, one = repro_run(3, "first"), repro_single()
    np.testing.assert_allclose(losses(three + "/run"), losses(one + "/run"), rtol=0, atol=TOLERANCE)
    err, key = max_difference(checkpoint_arrays(three + "/ckpt"), checkpoint_arrays(one + "/ckpt"))
    assert err < TOLERANCE, f"final weights differ from one process: {key} by {err}"


@pytest.mark.multirank
@pytest.mark.slow
@pytest.mark.parametrize("world, backend", [pytest.param(3, None, marks=pytest.mark.both_stacks, id="3"),
                                            pytest.param(4, "horovod", id="4-horovod")])
def test_the_same_command_twice_gives_the_same_bits(world, backend):
    """The stack's backend at 3 ranks (the same launches as the MPI backend's test below, on the current
    stack); Horovod at 4."""
    assert_same_bits(repro_run(world, "first", backend=backend), repro_run(world, "second", backend=backend))


@pytest.mark.multirank
@pytest.mark.slow
def test_three_mpi_backend_ranks_give_the_same_bits_twice_and_stay_near_one_process():
    first, second = repro_run(3, "first", backend="mpi"), repro_run(3, "second", backend="mpi")
    assert_same_bits(first, second)
    np.testing.assert_allclose(losses(first + "/run"), losses(repro_single() + "/run"), rtol=0, atol=TOLERANCE)
    err, key = max_difference(checkpoint_arrays(first + "/ckpt"), checkpoint_arrays(repro_single() + "/ckpt"))
    assert err < TOLERANCE, f"final weights differ from one process: {key} by {err}"


@pytest.mark.multirank
@pytest.mark.slow
def test_ids_sent_a_step_ahead_give_the_bits_of_ids_sent_inside_the_step():
    """The MPI backend sends each batch's ids to their tables' owners during the step before it
    (`dlrm.train.ids_ahead`); sent inside their own step (`--exchange_ids_in_step`) they train the same bits."""
    ahead = repro_run(3, "first", backend="mpi")
    in_step = repro_run(3, "in_step", backend="mpi", flags=("--exchange_ids_in_step",))
    said = "ids travel to their tables' owners during the step before it"  # the start-up line of `train`
    assert said in Path(ahead, "output.txt").read_text()
    assert said not in Path(in_step, "output.txt").read_text()
    assert_same_bits(ahead, in_step)


@pytest.mark.multirank
@pytest.mark.slow
def test_three_rank_training_does_not_depend_on_how_horovod_fuses_tensors():
    assert_same_bits(repro_run(3, "unfused", UNFUSED, "horovod"), repro_run(3, "fused", FUSED, "horovod"))
