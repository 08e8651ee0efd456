"""N ranks compute what 1 rank computes: the project's main correctness test (real processes).

One tiny DLRM whose 26 tables are planned into all four layouts at N = 2 and N = 3 (table 0
row-sliced, table 1 column-sliced, tables of <= 6 rows replicated, the rest whole) is trained with
the trainer's real code path (`dlrm.train.trainer.run`: reader with per-rank slices, the real
`tf.function` step, optimizer, checkpoint writer) for one epoch of 23 rows at global batch 7 — batches
of 7, 7, 7 and a last one of 2 rows, so the per-rank batches are uneven and at N = 3 one rank gets no
rows at all. Per optimizer (SGD and sparse Adagrad) the per-step losses and the final weights (dense,
every table, Adagrad accumulators; read from the final checkpoints) must equal a one-process run
with the same global batch to float32 tolerance, with Gloo at N = 2 and 3 and with MPI at N = 2.

Each launch also runs the embedding-layer checks of tests/test_distributed_embedding.py (initial
pieces, lookups and gradients vs `LocalEmbedding`) so that a multi-rank start-up is paid only once.
Launches are memoised per pytest session (`tests.support.multirank.memoised`) and shared with
tests/test_sharded_checkpoint.py (restore of the N = 3 checkpoint at N = 2 and N = 1).

This file is also the worker: `python tests/test_hybrid_parallel.py --worker <role> <dir> ...`.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from dlrm.embedding.planner import slots_for_optimizer
from tests.support.multirank import memoised, run_ranks, run_single, scratch_dir

# Tables: 0 row-sliced (1500 rows > budget of 1300 rows), 1 column-sliced (300 > 250 rows),
# those of <= 6 rows replicated, the rest table-wise. Row = DIM float32 = 32 bytes.
CARDINALITIES = [1500, 300, 3, 5, 40, 25, 12, 6, 50, 30, 20, 4, 60, 15, 10, 35, 45, 2, 18, 22, 28, 8, 33,
                 55, 14, 9]
DIM = 8
ROW_BYTES = DIM * 4
GLOBAL_BATCH = 7
TRAIN_ROWS = 23  # batches of 7, 7, 7, 2
STEPS = 4
OPTIMIZERS = {"sgd": "0.5", "adagrad": "0.1"}
TOLERANCE = 2e-5  # float32, a few steps: only summation order differs between world sizes
SEED = 5  # --seed: model initialisation (tables: `initial_table_values`) and data order


def train_flags(dataset: str, optimizer: str, run_dir: str, save: str, global_batch: int = GLOBAL_BATCH) -> list:
    """main.py flags of the equality runs: the same on every world size."""
    # The planner counts optimizer slots (Adagrad: one accumulator per weight) in table memory.
    row_bytes = ROW_BYTES * (1 + slots_for_optimizer(optimizer))
    return ["--dataset_path", dataset, "--embedding_dim", str(DIM), "--bottom_mlp_dims", f"16-{DIM}",
            "--top_mlp_dims", "16-1", "--optimizer", optimizer, "--learning_rate", OPTIMIZERS[optimizer],
            "--warmup_steps", "0", "--decay_steps", "0", "--global_batch_size", str(global_batch),
            "--valid_batch_size", "64", "--partial_batch", "keep", "--epochs", "1", "--log_every", "1",
            "--seed", str(SEED), "--intra_op_threads", "1", "--run_dir", run_dir, "--save_checkpoint_path", save,
            "--rank_memory", str(1300 * row_bytes), "--column_slice_threshold", str(250 * row_bytes),
            "--replicate_threshold", str(6 * row_bytes)]


def without_rank_memory(flags: list) -> list:
    """The flags for one process: --rank_memory is a per-rank budget, and one process must hold every
    table, which this budget (sized for several ranks) refuses before allocating."""
    at = flags.index("--rank_memory")
    return flags[:at] + flags[at + 2:]


def restore_flags(dataset: str, source: str, run_dir: str, save: str) -> list:
    """Resume the N=3 Adagrad checkpoint (step 4) and train one more step (a new epoch's first batch)."""
    flags = train_flags(dataset, "adagrad", run_dir, save)
    return flags + ["--restore_checkpoint_path", source, "--max_steps", str(STEPS + 1)]


def continued_flags(dataset: str, run_dir: str, save: str) -> list:
    """The uninterrupted one-process run that restored runs must match: Adagrad for 5 steps."""
    return train_flags(dataset, "adagrad", run_dir, save) + ["--max_steps", str(STEPS + 1)]


# ----------------------------------------------------------------------------------- worker
def _worker(role: str, base: str, dataset: str, optimizers: list, restore_from: str | None) -> None:
    """role: 'reference' (one process) or 'ranks'; trains with `optimizers`, optionally restores."""
    from dlrm import dist
    from dlrm.cli import parse_config
    from dlrm.train import trainer
    from tests.support.multirank import write_rank_result

    dist.init()
    rank = dist.rank()
    result = {"rank": rank, "world": dist.size()}

    def config(flags):
        return parse_config(flags if dist.size() > 1 else without_rank_memory(flags))

    if role == "ranks":
        from tests.embedding.test_distributed_embedding import check_layer_against_local

        result["layer"] = check_layer_against_local()
    for optimizer in optimizers:
        out = os.path.join(base, optimizer)
        trainer.run(config(train_flags(dataset, optimizer, out + "/run", out + "/ckpt")))
    if restore_from:
        out = os.path.join(base, "restored")
        trainer.run(config(restore_flags(dataset, restore_from, out + "/run", out + "/ckpt")))
    if role == "reference":
        out = os.path.join(base, "continued")
        trainer.run(config(continued_flags(dataset, out + "/run", out + "/ckpt")))
    write_rank_result(rank, result)


# ------------------------------------------------------------------------------------ launches
def make_dataset() -> str:
    from dlrm.data.synthetic import GeneratorParams, generate_dataset

    directory = scratch_dir("hybrid_data_")
    generate_dataset(directory, CARDINALITIES, TRAIN_ROWS, 32, seed=3,
                     params=GeneratorParams(zipf_exponent=0.3))  # ids spread over every row range
    return directory


def _dataset() -> str:
    return memoised("hybrid_dataset", make_dataset)


def launch_optimizers(mpi: bool) -> list:
    """MPI repeats the Gloo runs with the sparse-aware optimizer only (each run costs ~10 s of tracing)."""
    return ["adagrad"] if mpi else list(OPTIMIZERS)


def launch(world: int, mpi: bool = False, restore_from: str | None = None):
    """Train (and maybe restore) on `world` ranks; returns (RankRun, output directory)."""
    def go():
        base = scratch_dir(f"hybrid_{'mpi' if mpi else 'gloo'}{world}_")
        argv = ["tests/integration/test_hybrid_parallel.py", "--worker", "ranks", base, _dataset(),
                ",".join(launch_optimizers(mpi))]
        argv += [restore_from] if restore_from else []
        return run_ranks(world, argv, mpi=mpi, timeout=300), base
    return memoised(("hybrid", world, mpi, restore_from), go)


def reference(restore_from: str | None = None):
    """The one-process run (LocalEmbedding, no launcher) with the same global batch."""
    def go():
        base = scratch_dir("hybrid_ref_")
        argv = ["tests/integration/test_hybrid_parallel.py", "--worker", "reference", base, _dataset(), ",".join(OPTIMIZERS)]
        argv += [restore_from] if restore_from else []
        return run_single(argv, timeout=240), base
    return memoised(("hybrid_ref", restore_from), go)


def three_rank_checkpoint() -> str:
    run, base = launch(3)
    run.check()
    return os.path.join(base, "adagrad", "ckpt")


# ------------------------------------------------------------------------------- comparisons
def losses(run_dir: str) -> list:
    from dlrm.train.metrics_log import read_metrics

    records = [r for r in read_metrics(os.path.join(run_dir, "metrics.jsonl")) if r["kind"] == "train"]
    return [r["loss"] for r in sorted(records, key=lambda r: r["step"])]


def checkpoint_arrays(root: str) -> dict:
    """{name: array} of a checkpoint (whole tables per slot, from its pieces) plus its step and world size."""
    from dlrm.train import checkpoint

    arrays = checkpoint.read_arrays(root)
    meta = checkpoint.read_meta(checkpoint.find_checkpoint(root))
    arrays["meta/step"] = np.array(meta["step"])
    arrays["meta/world_size"] = np.array(meta["world_size"])
    return arrays


def max_difference(got: dict, want: dict) -> tuple:
    assert sorted(got) == sorted(want), set(got) ^ set(want)
    worst = max(((float(np.max(np.abs(got[k] - want[k]), initial=0.0)), k) for k in want
                 if not k.startswith("meta/")), default=(0.0, None))
    return worst


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
        # The comparison is not between two untouched initialisations: the rows of table 0 looked up
        # in these steps moved, the others (most of its 1500) still hold exactly their initial values.
        unchanged = np.all(want["t0/value"] == initial_table_values(0, CARDINALITIES[0], DIM, SEED), axis=1)
        assert unchanged.any() and not unchanged.all(), f"{optimizer}: {unchanged.sum()} rows of table 0 unchanged"


def assert_layer_checks(run, world: int) -> None:
    from tests.embedding.test_distributed_embedding import assert_layer_results

    assert_layer_results([run.results[r]["layer"] for r in range(world)], world)


def assert_plan_has_every_kind(base: str, world: int) -> None:
    from dlrm.train import checkpoint

    meta = checkpoint.read_meta(checkpoint.find_checkpoint(os.path.join(base, "adagrad", "ckpt")))
    kinds = [t["kind"] for t in meta["plan"]["tables"]]
    assert meta["plan"]["world_size"] == world
    assert kinds[0] == "row_sliced" and kinds[1] == "column_sliced", kinds
    assert {"table_wise", "replicated"} <= set(kinds), kinds


# ------------------------------------------------------------------------------------ tests
# One horovodrun launch per (world size, controller), shared by both tests below; the 2-rank Gloo
# launch also restores the 3-rank checkpoint (world-size change).
EVERY_LAUNCH = pytest.mark.parametrize("world,mpi", [(3, False), (2, False), (2, True)],
                                       ids=["gloo-3", "gloo-2", "mpi-2"])


def checked_launch(world: int, mpi: bool):
    restore = three_rank_checkpoint() if (world, mpi) == (2, False) else None
    run, base = launch(world, mpi, restore_from=restore)
    run.check()
    return run, base


@pytest.mark.multirank
@pytest.mark.slow
@EVERY_LAUNCH
def test_n_ranks_train_exactly_like_one_process(world, mpi):
    run, base = checked_launch(world, mpi)
    ref_run, ref_base = reference(restore_from=three_rank_checkpoint())
    ref_run.check()
    assert_plan_has_every_kind(base, world)
    assert_same_training(base, ref_base, world, launch_optimizers(mpi))


@pytest.mark.multirank
@pytest.mark.slow
@EVERY_LAUNCH
def test_embedding_layer_matches_local_embedding_in_the_same_launch(world, mpi):
    run, _ = checked_launch(world, mpi)
    assert_layer_checks(run, world)


@pytest.mark.multirank
@pytest.mark.slow
def test_progress_lines_reach_the_output_under_mpi():
    """mpirun hands each rank a pseudo-terminal and forwards it into a pipe: a redrawn bar never shows
    up as lines there, so rank 0 must print plain progress lines (one per step with --log_every 1)."""
    run, _ = checked_launch(2, mpi=True)
    progress = re.findall(r"^\[1,0\]<stdout>:step +(\d+) +epoch .* loss [0-9.]+ ", run.stdout, flags=re.MULTILINE)
    assert progress == [str(step) for step in range(1, STEPS + 1)], run.stdout[-3000:]


# ---------------------------------------------------------------- reproducibility with 3+ ranks
# `main.py` with SGD on the same dataset and plan for 40 steps (10 epochs of 7, 7, 7, 2 rows), a checkpoint
# every 10 steps. With 2 ranks a + b == b + a, so only 3 or more ranks can show a summation order that
# changes between runs (docs/hybrid_parallel.md, "Reproducible reductions").
REPRO_STEPS = 40
REPRO_CHECKPOINT_EVERY = 10
# Every allreduce alone in Horovod's buffer, or all of a step's tensors fused into one (a long cycle).
UNFUSED = {"HOROVOD_FUSION_THRESHOLD": "0"}
FUSED = {"HOROVOD_CYCLE_TIME": "20"}


def repro_command(base: str) -> list:
    """The `main.py` argv (the same on every world size) of the reproducibility runs, writing under `base`."""
    flags = train_flags(_dataset(), "sgd", base + "/run", base + "/ckpt")
    return ["main.py", *flags, "--max_steps", str(REPRO_STEPS), "--checkpoint_every", str(REPRO_CHECKPOINT_EVERY),
            "--keep_checkpoints", "2"]


def repro_run(world: int, label: str, env: dict | None = None) -> str:
    """One memoised, checked launch of `repro_command` on `world` ranks; returns its output directory."""
    def go():
        base = scratch_dir(f"repro{world}_{label}_")
        run_ranks(world, repro_command(base), env=env, timeout=180).check()
        return base
    return memoised(("repro", world, label), go)


def assert_same_bits(base: str, other: str) -> None:
    """Final weights (every array of the checkpoint) and every logged loss equal bit for bit."""
    got, want = checkpoint_arrays(base + "/ckpt"), checkpoint_arrays(other + "/ckpt")
    assert int(got["meta/step"]) == int(want["meta/step"]) == REPRO_STEPS
    assert sorted(got) == sorted(want)
    different = {k: float(np.max(np.abs(got[k] - want[k]))) for k in want if not np.array_equal(got[k], want[k])}
    assert different == {}, f"{len(different)} arrays differ, largest {max(different.values())}: {sorted(different)}"
    assert losses(base + "/run") == losses(other + "/run")


def repro_single() -> str:
    """The one-process run of `repro_command` (LocalEmbedding, no launcher)."""
    def go():
        base = scratch_dir("repro1_")
        run_single(without_rank_memory(repro_command(base)), timeout=180).check()
        return base
    return memoised(("repro", 1, "single"), go)


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
@pytest.mark.parametrize("world", [3, 4])
def test_the_same_command_twice_gives_the_same_bits(world):
    assert_same_bits(repro_run(world, "first"), repro_run(world, "second"))


@pytest.mark.multirank
@pytest.mark.slow
def test_three_rank_training_does_not_depend_on_how_horovod_fuses_tensors():
    assert_same_bits(repro_run(3, "unfused", UNFUSED), repro_run(3, "fused", FUSED))


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--worker":
    _worker(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5].split(","),
            sys.argv[6] if len(sys.argv) > 6 else None)
