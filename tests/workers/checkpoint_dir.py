"""One rank of tests/train/test_checkpoint_dir.py's multi-rank launches (world size from the launcher).

    python -m tests.workers.checkpoint_dir prepare ROOT [ROOT_OF_RANK_1] [--hold-until FILE]
        prepare_checkpoint_dir(ROOT) with the real collectives; with --hold-until, keep the lock until
        FILE exists (the test starts a second run meanwhile).
    python -m tests.workers.checkpoint_dir save ROOT ROWS_OF_RANK_1
        save_checkpoint step 1, then step 2 where rank 1 stores a ROWS x 64 float32 piece.
    python -m tests.workers.checkpoint_dir restore ROOT
        save step 1, delete rank 1's piece, restore.
    python -m tests.workers.checkpoint_dir damage ROOT
        for each damage of `tests.support.damage.cases()`: save a checkpoint with dense variables and an
        optimizer slot under ROOT/<kind>-<way>, damage it (rank 0), restore; reports {"cases": {case: outcome}}.

Each rank reports {"outcome": "ok" | error class name, "message", "lock_held", "pid"} via write_rank_result.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from dlrm import dist
from dlrm.cli_errors import user_error_text
from dlrm.embedding.base import TablePiece
from dlrm.errors import UserError
from dlrm.train import checkpoint
from tests.support.multirank import write_rank_result

HOLD_TIMEOUT_SECONDS = 120


def _prepare(args, comm) -> dict:
    root = args.root_of_rank_1 if comm.rank == 1 and args.root_of_rank_1 else args.root
    lock = checkpoint.prepare_checkpoint_dir(root, 1000, comm)
    with lock:
        held = lock.held
        if args.hold_until:
            write_rank_result(comm.rank, {"outcome": "holding", "lock_held": held, "pid": os.getpid()})
            deadline = time.monotonic() + HOLD_TIMEOUT_SECONDS
            while not os.path.exists(args.hold_until) and time.monotonic() < deadline:
                time.sleep(0.1)
            comm.barrier()
    return {"lock_held": held, "pid": os.getpid()}


TABLE_NAMES = ["t0", "t1"]  # rank r saves table r


def _save(args, comm) -> dict:
    import tensorflow as tf

    def piece(step, rows):
        table = TablePiece(comm.rank, 0, rows, 0, 64)
        return [(table, {"value": tf.Variable(np.full((rows, 64), step, np.float32))})]

    meta = {"model_shape": {"tables": [{"name": name, "rows": 4, "dim": 64} for name in TABLE_NAMES]}}
    checkpoint.save_checkpoint(args.root, 1, {}, piece(1, 4), meta, group=comm, table_names=TABLE_NAMES)
    rows = args.rows_of_rank_1 if comm.rank == 1 else 4
    checkpoint.save_checkpoint(args.root, 2, {}, piece(2, rows), meta, group=comm, table_names=TABLE_NAMES)
    return {}


def _restore(args, comm) -> dict:
    """Save step 1 on every rank, delete rank 1's piece (as a lost file on its node would), restore."""
    import tensorflow as tf

    table = TablePiece(comm.rank, 0, 4, 0, 64)
    variable = tf.Variable(np.ones((4, 64), np.float32))
    meta = {"model_shape": {"tables": [{"name": name, "rows": 4, "dim": 64} for name in TABLE_NAMES]}}
    path = checkpoint.save_checkpoint(args.root, 1, {}, [(table, {"value": variable})], meta, group=comm,
                                      table_names=TABLE_NAMES)
    if comm.rank == 1:
        os.remove(os.path.join(path, "embedding", "t1", "value", checkpoint.piece_file_name(table)))
    comm.barrier()
    checkpoint.restore_checkpoint(path, {}, [(table, {"value": variable})], group=comm, table_names=TABLE_NAMES)
    return {}


def _damage(args, comm) -> dict:
    import tensorflow as tf

    from tests.support.damage import cases, damage

    def variables():
        table = TablePiece(comm.rank, 0, 4, 0, 64)
        dense = {"d000_kernel": tf.Variable(np.ones((3, 5), np.float32))}
        return dense, [(table, {slot: tf.Variable(np.ones((4, 64), np.float32)) for slot in ("value", "accumulator")})]

    meta = {"model_shape": {"tables": [{"name": name, "rows": 4, "dim": 64} for name in TABLE_NAMES]}}
    outcomes = {}
    for kind, way in cases():
        path = checkpoint.save_checkpoint(os.path.join(args.root, f"{kind}-{way}"), 1, *variables(), meta,
                                          group=comm, table_names=TABLE_NAMES)
        if comm.rank == 0:
            damage(path, kind, way)
        comm.barrier()
        try:
            checkpoint.restore_checkpoint(path, *variables(), group=comm, table_names=TABLE_NAMES)
            outcomes[f"{kind}-{way}"] = {"outcome": "ok"}
        except UserError as error:
            outcomes[f"{kind}-{way}"] = {"outcome": type(error).__name__, "message": str(error)}
    return {"cases": outcomes}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["prepare", "save", "restore", "damage"])
    parser.add_argument("root")
    parser.add_argument("root_of_rank_1", nargs="?")
    parser.add_argument("--hold-until")
    parser.add_argument("--rows-of-rank-1", type=int, default=4)
    args = parser.parse_args()
    comm = dist.start()
    try:
        modes = {"prepare": _prepare, "save": _save, "restore": _restore, "damage": _damage}
        report = dict(outcome="ok", **modes[args.mode](args, comm))
    except UserError as error:
        report = {"outcome": type(error).__name__, "message": str(error),
                  "printed": user_error_text(error, comm.rank, comm.size)}
    write_rank_result(comm.rank, report)


if __name__ == "__main__":
    main()
