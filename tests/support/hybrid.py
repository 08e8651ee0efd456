"""The tiny hybrid-parallel model trained on 1, 2, 3 and 4 ranks: its flags, dataset, memoised launches
(`python -m tests.workers.hybrid_parallel` under horovodrun, and `main.py` runs), and the comparisons of
their losses and checkpoints.

One launch per (world size, controller) is paid once per pytest session (`tests.support.multirank.memoised`)
and read by several tests: tests/integration/test_hybrid_parallel.py, test_sharded_checkpoint.py (restore of
the N = 3 checkpoint at N = 2 and N = 1), test_resume_sigkill.py (the 3-rank reproducibility run).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dlrm.embedding.optimizer_slots import slots_for_optimizer
from tests.support.multirank import STACK_BACKEND, memoised, run_ranks, run_single, scratch_dir, worker_argv

# Tables: 0 row-sliced (1500 rows > budget of 1300 rows), 1 column-sliced (300 > 250 rows),
# those of <= 6 rows replicated, the rest table-wise. Row = DIM float32 = 32 bytes.
CARDINALITIES = [1500, 300, 3, 5, 40, 25, 12, 6, 50, 30, 20, 4, 60, 15, 10, 35, 45, 2, 18, 22, 28, 8, 33,
                 55, 14, 9]
# Multi-hot bags in every sharded layout: cat_0 row-sliced (mean), cat_1 column-sliced, cat_2 replicated,
# cat_4 table-wise (mean); the other tables one-hot. The contract lists the one-hot tables first.
HOTNESS = {"cat_0": 3, "cat_1": 2, "cat_2": 2, "cat_4": 4}
MEAN_COMBINER = ("cat_0", "cat_4")
TABLE_ORDER = ([f"cat_{i}" for i in range(len(CARDINALITIES)) if f"cat_{i}" not in HOTNESS]
               + [f"cat_{i}" for i in range(len(CARDINALITIES)) if f"cat_{i}" in HOTNESS])
DIM = 8
ROW_BYTES = DIM * 4
GLOBAL_BATCH = 7
TRAIN_ROWS = 23  # batches of 7, 7, 7, 2
STEPS = 4
OPTIMIZERS = {"sgd": "0.5", "adagrad": "0.1"}
# A Wide & Deep run beside the optimizers' (FTRL + RMSprop, dropout 0.1 with row-keyed masks): its deep tables
# in the same layouts, its dim-1 wide tables of <= 48 rows replicated, the others whole, and two crosses in
# the wide part (125 pairs exact; 3000 hashed into 400 rows): their ids travel in the exchange like any other.
WIDEDEEP = "widedeep"
WIDEDEEP_FLAGS = ["--arch", "widedeep", "--deep_hidden_units", "16", "8", "--deep_dropout", "0.1",
                  "--wide_crosses", "cat_3:cat_5,cat_8:cat_12", "--wide_cross_buckets", "400",  # exact, hashed
                  "--linear_learning_rate", "0.2", "--deep_learning_rate", "0.05", "--deep_warmup_epochs", "0.25"]
# Deep tables of DIM columns with two slots (FTRL's count, the planner's figure for the run) plus the wide tables:
# cat_0 (1500 rows) stays over one rank's budget, all tables fit on two ranks.
WIDEDEEP_BUDGET_ROWS = 1400
TOLERANCE = 2e-5  # float32, a few steps: only summation order differs between world sizes
SEED = 5  # --seed: model initialisation (tables: `initial_table_values`) and data order


def train_flags(dataset: str, optimizer: str, run_dir: str, save: str, global_batch: int = GLOBAL_BATCH) -> list:
    """main.py flags of the equality runs: the same on every world size (`optimizer` WIDEDEEP: Wide & Deep)."""
    # The planner counts optimizer slots (Adagrad: one accumulator per weight) in table memory.
    row_bytes = ROW_BYTES * (1 + slots_for_optimizer("ftrl" if optimizer == WIDEDEEP else optimizer))
    budget_rows = WIDEDEEP_BUDGET_ROWS if optimizer == WIDEDEEP else 1300
    model = WIDEDEEP_FLAGS if optimizer == WIDEDEEP else [
        "--bottom_mlp_dims", f"16-{DIM}", "--top_mlp_dims", "16-1", "--optimizer", optimizer, "--learning_rate",
        OPTIMIZERS[optimizer], "--warmup_steps", "0", "--decay_steps", "0"]
    return ["--dataset_path", dataset, "--embedding_dim", str(DIM), *model, "--global_batch_size", str(global_batch),
            "--valid_batch_size", "64", "--partial_batch", "keep", "--epochs", "1", "--log_every", "1",
            "--seed", str(SEED), "--intra_op_threads", "1", "--run_dir", run_dir, "--save_checkpoint_path", save,
            "--rank_memory", str(budget_rows * row_bytes), "--column_slice_threshold", str(250 * row_bytes),
            "--replicate_threshold", str(6 * row_bytes)]


def eval_flags(dataset: str, run_dir: str) -> list:
    """main.py flags that evaluate a checkpoint of the equality runs (the model comes from the checkpoint)."""
    return ["--dataset_path", dataset, "--valid_batch_size", "64", "--intra_op_threads", "1", "--run_dir", run_dir]


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


def make_dataset() -> str:
    from dlrm.data.synthetic.generator import generate_dataset
    from dlrm.data.synthetic.sampling import GeneratorParams

    directory = scratch_dir("hybrid_data_")
    hotness = [HOTNESS.get(f"cat_{i}", 1) for i in range(len(CARDINALITIES))]
    spec = generate_dataset(directory, CARDINALITIES, TRAIN_ROWS, 32, seed=3, hotness=hotness,
                            params=GeneratorParams(zipf_exponent=0.3))  # ids spread over every row range
    for name in MEAN_COMBINER:
        spec.feature_spec[name]["combiner"] = "mean"
    spec.save(directory)
    return directory


def shared_dataset() -> str:
    """The mixed one-hot / multi-hot dataset every hybrid launch trains on (made once per session)."""
    return memoised("hybrid_dataset", make_dataset)


def launch_optimizers(mpi: bool, backend: str = "horovod", world: int = 2) -> list:
    """Horovod's MPI controller repeats the Gloo runs with the sparse-aware optimizer only, the MPI backend
    with it and Wide & Deep at 2 ranks, everything at 3 (each run costs ~10 s of tracing)."""
    if backend == "mpi":
        return [*OPTIMIZERS, WIDEDEEP] if world > 2 else ["adagrad", WIDEDEEP]
    return ["adagrad"] if mpi else [*OPTIMIZERS, WIDEDEEP]


def launch(world: int, mpi: bool = False, restore_from: str | None = None, backend: str | None = None):
    """Train (and maybe restore) on `world` ranks (`backend`: the stack's by default); returns (RankRun, output
    directory)."""
    backend = backend or STACK_BACKEND

    def go():
        base = scratch_dir(f"hybrid_{'mpi4py' if backend == 'mpi' else 'mpi' if mpi else 'gloo'}{world}_")
        argv = worker_argv("hybrid_parallel", "ranks", base, shared_dataset(),
                           ",".join(launch_optimizers(mpi, backend, world)), *([restore_from] if restore_from else []))
        return run_ranks(world, argv, mpi=mpi, timeout=600, backend=backend), base
    return memoised(("hybrid", world, mpi, restore_from, backend), go)


def reference(restore_from: str | None = None):
    """The one-process run (LocalEmbedding, no launcher) with the same global batch."""
    def go():
        base = scratch_dir("hybrid_ref_")
        argv = worker_argv("hybrid_parallel", "reference", base, shared_dataset(), ",".join(launch_optimizers(False)),
                           *([restore_from] if restore_from else []))
        return run_single(argv, timeout=480), base
    return memoised(("hybrid_ref", restore_from), go)


def three_rank_checkpoint() -> str:
    run, base = launch(3)
    run.check()
    return os.path.join(base, "adagrad", "ckpt")


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


# ---------------------------------------------------------------- resharding 3 -> 2 -> 1
def reshard_to_one_process(two_rank_checkpoint: str) -> tuple:
    """(resumed, uninterrupted) output directories: one process resumes the checkpoint the 2-rank launch
    wrote after resuming the 3-rank one (step STEPS + 1) and trains one more step; the uninterrupted
    one-process run trains STEPS + 2 steps."""
    def go():
        resumed, uninterrupted = scratch_dir("reshard_resumed_"), scratch_dir("reshard_uninterrupted_")
        steps = ["--max_steps", str(STEPS + 2)]
        flags = train_flags(shared_dataset(), "adagrad", resumed + "/run", resumed + "/ckpt")
        run_single(["main.py", *without_rank_memory(flags), *steps, "--restore_checkpoint_path",
                    two_rank_checkpoint], timeout=360).check()
        flags = train_flags(shared_dataset(), "adagrad", uninterrupted + "/run", uninterrupted + "/ckpt")
        run_single(["main.py", *without_rank_memory(flags), *steps], timeout=360).check()
        return resumed, uninterrupted
    return memoised(("reshard", two_rank_checkpoint), go)


# ---------------------------------------------------------------- reproducibility with 3+ ranks
# `main.py` with SGD on the same dataset and plan for 40 steps (10 epochs of 7, 7, 7, 2 rows), a checkpoint
# every 10 steps. With 2 ranks a + b == b + a, so only 3 or more ranks can show a summation order that
# changes between runs (docs/hybrid_parallel.md, "Reproducible reductions").
REPRO_STEPS = 40
REPRO_CHECKPOINT_EVERY = 10


def repro_command(base: str) -> list:
    """The `main.py` argv (the same on every world size) of the reproducibility runs, writing under `base`."""
    flags = train_flags(shared_dataset(), "sgd", base + "/run", base + "/ckpt")
    return ["main.py", *flags, "--max_steps", str(REPRO_STEPS), "--checkpoint_every", str(REPRO_CHECKPOINT_EVERY),
            "--keep_checkpoints", "2"]


def repro_run(world: int, label: str, env: dict | None = None, backend: str | None = None,
              flags: tuple = ()) -> str:
    """One memoised, checked launch of `repro_command` (plus `flags`) on `world` ranks (`backend`: the stack's
    by default); returns its output directory, where `output.txt` holds what the ranks printed."""
    backend = backend or STACK_BACKEND

    def go():
        base = scratch_dir(f"repro{world}_{backend}_{label}_")
        run = run_ranks(world, repro_command(base) + list(flags), env=env, timeout=360, backend=backend).check()
        Path(base, "output.txt").write_text(run.stdout + run.stderr)
        return base
    return memoised(("repro", world, label, backend), go)


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
        run_single(without_rank_memory(repro_command(base)), timeout=360).check()
        return base
    return memoised(("repro", 1, "single"), go)


# ---------------------------------------------------------------- hand-built plans for the layer tests
def hand_plan(tables, world: int, kinds: list):
    """A Plan placing `tables` (TableConfigs) on `world` ranks with the given kind per table, built by hand.

    row_sliced: `world` contiguous row ranges of unequal size; column_sliced: min(world, dim) column ranges;
    table_wise: the whole table on rank t % world; replicated: a full copy on every rank. Pieces of table t
    start at rank t % world, so every rank owns some of each sliced kind.
    """
    from dlrm.embedding.pieces import TablePiece
    from dlrm.embedding.planner import OwnedPiece, Plan, RankLoad, TablePlacement

    placements = []
    for t, (table, kind) in enumerate(zip(tables, kinds)):
        if kind == "replicated":
            pieces = [OwnedPiece(r, TablePiece(t, 0, table.rows, 0, table.dim)) for r in range(world)]
        elif kind == "table_wise":
            pieces = [OwnedPiece(t % world, TablePiece(t, 0, table.rows, 0, table.dim))]
        elif kind == "row_sliced":
            cuts = _cuts(table.rows, world)
            pieces = [OwnedPiece((t + i) % world, TablePiece(t, a, b, 0, table.dim)) for i, (a, b) in enumerate(cuts)]
        else:
            cuts = _cuts(table.dim, min(world, table.dim))
            pieces = [OwnedPiece((t + i) % world, TablePiece(t, 0, table.rows, a, b)) for i, (a, b) in enumerate(cuts)]
        placements.append(_dataclass(TablePlacement, table=t, rows=table.rows, kind=kind, pieces=pieces,
                                     lookups_per_sample=float(table.hotness), name=table.name, dim=table.dim,
                                     hotness=table.hotness))
    return _dataclass(Plan, world_size=world, dim=tables[0].dim, strategy="by_hand", bytes_per_element=4,
                      optimizer_slots=0, tables=placements, ranks=[RankLoad(r) for r in range(world)])


def _cuts(size: int, parts: int) -> list:
    """`parts` contiguous ranges of [0, size), the first one a third larger than the others (unequal)."""
    if parts == 1:
        return [(0, size)]
    first = max(1, min(size - parts + 1, (size * 4) // (3 * parts + 1)))
    rest = _even_cuts(size - first, parts - 1)
    return [(0, first)] + [(first + a, first + b) for a, b in rest]


def _even_cuts(size: int, parts: int) -> list:
    bounds = [size * i // parts for i in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def _dataclass(cls, **fields):
    """`cls(**fields)` with only the fields `cls` has (Plan/TablePlacement before and after per-table dims)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in names})
