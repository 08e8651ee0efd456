"""One rank (or the one-process reference) of the hybrid-parallel launches of tests/support/hybrid.py:
train the tiny model with each optimizer through the trainer's real code path, optionally restore a
checkpoint, and (ranks) run the embedding-layer checks in the same launch.

    python -m tests.workers.hybrid_parallel ranks|reference BASE DATASET OPTIMIZER[,OPTIMIZER] [RESTORE_FROM]
"""
from __future__ import annotations

import os
import sys

from dlrm import dist
from dlrm.cli import parse_config
from dlrm.train.run import run
from tests.support.embedding_layer import check_layer_against_local
from tests.support.hybrid import continued_flags, restore_flags, train_flags, without_rank_memory
from tests.support.multirank import write_rank_result


def main(role: str, base: str, dataset: str, optimizers: list, restore_from: str | None) -> None:
    """role: 'reference' (one process) or 'ranks'; trains with `optimizers`, optionally restores."""
    group = dist.start()
    rank = group.rank
    result = {"rank": rank, "world": group.size, "backend": group.backend}

    def config(flags):
        return parse_config(flags if group.size > 1 else without_rank_memory(flags))

    if role == "ranks":
        result["layer"] = check_layer_against_local()
    for optimizer in optimizers:
        out = os.path.join(base, optimizer)
        run(config(train_flags(dataset, optimizer, out + "/run", out + "/ckpt")))
    if restore_from:
        out = os.path.join(base, "restored")
        run(config(restore_flags(dataset, restore_from, out + "/run", out + "/ckpt")))
    if role == "reference":
        out = os.path.join(base, "continued")
        run(config(continued_flags(dataset, out + "/run", out + "/ckpt")))
    write_rank_result(rank, result)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(","), sys.argv[5] if len(sys.argv) > 5 else None)
