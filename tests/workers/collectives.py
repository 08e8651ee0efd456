"""One rank of tests/integration/test_mpi_backend.py: every collective of the process group on real ranks.

    python -m tests.workers.collectives check     every collective, eager and inside tf.function; writes the
                                                  bits of its fixed-buffer average (the test compares ranks)
    python -m tests.workers.collectives stall R   rank R stops itself (SIGSTOP) before a barrier
    python -m tests.workers.collectives leave R   after an error rank R reports, the others clean up first

Uneven and empty splits, zero-row inputs, gradients of the all-to-all, an all-to-all started early and
finished after the other collectives; rank-dependent sleeps vary the
timing; each rank's time in collectives by kind. A failed check raises: the launch ends non-zero with the traceback.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from dlrm import dist
from tests.support.multirank import RESULT_DIR_ENV, write_rank_result


def splits_of(source: int, world: int) -> list:
    """Rows rank `source` sends to each rank: uneven, some empty (rank 1 sends nothing at all)."""
    return [0 if source == 1 else (source + 2 * d) % 4 for d in range(world)]


def rows_from(source: int, world: int) -> np.ndarray:
    """[rows, 3] float32 whose values name (source, destination, row)."""
    blocks = [np.array([[source, d, i] for i in range(n)], np.float32).reshape(-1, 3)
              for d, n in enumerate(splits_of(source, world))]
    return np.concatenate(blocks) + 0.25


def exchange_and_gradient(group, x, splits, name=None):
    """All-to-all of `x`, and the gradient of a loss giving rows sent to rank d d + 1 times their value."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        received, received_splits = group.alltoall(x, splits, name=name)
        loss = tf.reduce_sum(0.5 * (group.rank + 1) * received * received)
    return received, received_splits, tape.gradient(loss, x), loss


def check_received(group, received: np.ndarray, received_splits: np.ndarray) -> None:
    """What this rank must receive from an all-to-all of every rank's `rows_from` cut by `splits_of`."""
    rank, world = group.rank, group.size
    want = np.concatenate([rows_from(s, world)[sum(splits_of(s, world)[:rank]):][:splits_of(s, world)[rank]]
                           for s in range(world)])
    np.testing.assert_array_equal(received, want)
    assert received_splits.tolist() == [splits_of(s, world)[rank] for s in range(world)]


def check_exchange(group, received, received_splits, grad) -> None:
    rank, world = group.rank, group.size
    check_received(group, received.numpy(), received_splits.numpy())
    destination = np.repeat(np.arange(world), splits_of(rank, world)).astype(np.float32)
    np.testing.assert_array_equal(grad.numpy(), rows_from(rank, world) * (destination[:, None] + 1))


def inputs(group):
    return tf.constant(rows_from(group.rank, group.size)), tf.constant(splits_of(group.rank, group.size), tf.int32)


def check_fixed_buffer(group) -> list:
    """The dense average: sum in rank order / N, the same bits on every rank, whatever the timing."""
    rng = np.random.default_rng(100 + group.rank)
    parts = [(rng.normal(size=shape) * 10.0 ** rng.integers(-4, 4)).astype(np.float32) for shape in ((7, 3), (5,), ())]
    time.sleep(0.2 * ((group.rank * 7) % group.size))  # ranks arrive in a different order
    means = group.average_in_fixed_buffers([tf.constant(p) for p in parts], name="dense")
    gathered = group.allgather_object([p.tolist() for p in parts], name="parts")
    for i, mean in enumerate(means):
        total = np.array(gathered[0][i], np.float32)
        for r in range(1, group.size):
            total = total + np.array(gathered[r][i], np.float32)
        np.testing.assert_array_equal(mean.numpy(), total / np.float32(group.size))
    return [mean.numpy().tobytes().hex() for mean in means]


def check_the_rest(group) -> None:
    rank, world = group.rank, group.size
    # allgather: variable first dimension, rank 1 contributes no rows
    rows = 0 if rank == 1 else rank + 1
    gathered = group.allgather(tf.fill([rows, 2], rank), name="gather").numpy()
    assert gathered.tolist() == [[r, r] for r in range(world) for _ in range(0 if r == 1 else r + 1)], gathered
    assert group.allgather(tf.zeros([0, 4], tf.float32)).shape == (0, 4)
    assert group.allreduce_sum(tf.constant([rank, 1], tf.int64)).numpy().tolist() == [world * (world - 1) // 2, world]
    assert group.max_over_ranks(10 - rank) == 10
    assert bool(group.all_ranks_true(tf.constant(True)).numpy())
    assert not bool(group.all_ranks_true(tf.constant(rank != world - 1)).numpy())
    assert group.broadcast_object({"step": rank, "pair": (1, 2)}, root_rank=world - 1) == \
        {"step": world - 1, "pair": [1, 2]}
    variables = [tf.Variable(tf.fill([2, 3], float(rank))), tf.Variable(rank, dtype=tf.int64)]
    group.broadcast_variables(variables, root_rank=1)
    assert variables[0].numpy().tolist() == [[1.0] * 3] * 2 and int(variables[1].numpy()) == 1
    group.barrier()
    failures = group.agree("disk full" if rank == world - 1 else None)
    assert [(f.rank, f.message) for f in failures] == [(world - 1, "disk full")]
    sparse = tf.IndexedSlices(tf.fill([rank, 2], float(rank + 1)), tf.range(rank, dtype=tf.int64),
                              tf.constant([9, 2], tf.int64))
    mean = group.allreduce_sparse_mean(sparse)
    assert mean.indices.numpy().tolist() == [i for r in range(world) for i in range(r)]
    rows_of = np.array([[r + 1] * 2 for r in range(world) for _ in range(r)], np.float32).reshape(-1, 2)
    np.testing.assert_array_equal(mean.values.numpy(), rows_of / np.float32(world))


LATE_SECONDS = 1.0  # rank 0 enters the last barrier this long after every other rank is about to enter it


def check_the_clock(group) -> dict:
    """Every kind of collective was timed; the ranks that waited for rank 0 to arrive count it as waiting.

    The order of arrival is made, not hoped for: each other rank leaves a file just before it enters the
    barrier, and rank 0 enters LATE_SECONDS after it has seen them all, so every other rank waits about that
    long however the ranks were scheduled before."""
    group.barrier()
    arrivals = Path(os.environ[RESULT_DIR_ENV]) / "barrier_arrivals"
    arrivals.mkdir(exist_ok=True)
    before = group.collective_seconds()["barrier"].waiting
    if group.rank == 0:
        deadline = time.monotonic() + 60
        while len(list(arrivals.iterdir())) < group.size - 1:
            assert time.monotonic() < deadline, f"only {sorted(os.listdir(arrivals))} reached the barrier in 60 s"
            time.sleep(0.01)
        time.sleep(LATE_SECONDS)
    else:
        (arrivals / str(group.rank)).touch()
    group.barrier()
    clock = group.collective_seconds()
    assert set(clock) == {"alltoall", "allreduce", "allgather", "broadcast", "barrier"}, clock
    for kind, spent in clock.items():
        assert spent.calls >= 1 and 0 <= spent.waiting <= spent.seconds, (kind, spent)
    return {"barrier_waited": clock["barrier"].waiting - before}


def check(group) -> None:
    # Started early, finished after every other check: the collectives in between do not disturb it.
    early = group.start_alltoall(rows_from(group.rank, group.size), np.array(splits_of(group.rank, group.size)),
                                 "early")
    check_exchange(group, *exchange_and_gradient(group, *inputs(group))[:3])  # eager

    @tf.function(autograph=False)
    def in_graph(x, splits):
        # The step's pattern in one graph: a forward all-to-all, its gradient, a dense average, an allgather.
        received, received_splits, grad, loss = exchange_and_gradient(group, x, splits, name="rows")
        [mean] = group.average_in_fixed_buffers([loss], name="loss")
        return received, received_splits, grad, mean, group.allgather(tf.reshape(loss, [1]), name="losses")

    for _ in range(2):  # traced once, run twice
        received, received_splits, grad, mean, losses = in_graph(*inputs(group))
        check_exchange(group, received, received_splits, grad)
        np.testing.assert_allclose(mean.numpy(), np.mean(losses.numpy()), rtol=1e-6)
    check_the_rest(group)
    check_received(group, *early.wait())
    bits = check_fixed_buffer(group)
    clock = check_the_clock(group)
    write_rank_result(group.rank, {"backend": group.backend, "size": group.size, "bits": bits, **clock})


def stall(group, stopped: int) -> None:
    group.barrier()
    write_rank_result(group.rank, {"pid": os.getpid()})
    if group.rank == stopped:
        os.kill(os.getpid(), signal.SIGSTOP)
    group.allgather_object("after the stop", name="after_stop")


LEAVE_GRACE_SECONDS = 60.0  # far above how long the leave test allows the job
CLEANUP_SECONDS = 2.0


def leave(group, reporting: int) -> None:
    """As `dlrm.cli_errors` after an agreed error: rank `reporting` prints it and leaves; the others first
    clean up (slowly: `CLEANUP_SECONDS`, then a file the test looks for), then leave without a word."""
    group.barrier()
    write_rank_result(group.rank, {"pid": os.getpid(), "erred_at": time.time()})
    if group.rank == reporting:
        print(f"error: rank {group.rank}: reported", file=sys.stderr, flush=True)
    else:
        time.sleep(CLEANUP_SECONDS)
        Path(os.environ[RESULT_DIR_ENV], f"cleaned_up_{group.rank}").touch()
    group.leave_after_error(reported=group.rank == reporting, grace_seconds=LEAVE_GRACE_SECONDS)
    sys.exit(3)


if __name__ == "__main__":
    started = dist.start()
    if sys.argv[1] == "check":
        check(started)
    elif sys.argv[1] == "stall":
        stall(started, int(sys.argv[2]))
    else:
        leave(started, int(sys.argv[2]))
