"""--benchmark (train mode): training throughput, as NVIDIA's Wide & Deep `--benchmark` measures it.

`benchmark_warmup_steps` untimed steps (tracing, first-touch allocations), then `benchmark_steps` timed
ones over the training mapping (epoch after epoch if it is short); global samples/s is reported and the
run stops without a checkpoint or an evaluation. The weights do train during the measurement.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from dlrm.train.build import Parts
from dlrm.train.ids_ahead import StepBatches
from dlrm.train.loop import training_batches, training_reader
from dlrm.train.metrics_log import MetricsLog
from dlrm.train.result import RunResult
from dlrm.train.step import make_train_step


def train_benchmark(parts: Parts, log: MetricsLog) -> RunResult:
    """Time `benchmark_steps` training steps after `benchmark_warmup_steps`; global samples/s."""
    cfg = parts.config.train
    reader = training_reader(parts)
    parts.training_optimizer().schedule.set_steps_per_epoch(len(reader))
    rows, started = 0, 0.0
    total_steps = cfg.benchmark_warmup_steps + cfg.benchmark_steps
    with contextlib.closing(StepBatches(training_batches(reader, 0, len(reader)), parts, total_steps)) as batches:
        train_step = make_train_step(parts, ids_received=batches.ids_ahead)
        for i in range(total_steps):
            if i == cfg.benchmark_warmup_steps:
                parts.group.barrier()
                started = time.perf_counter()
            batch, ids_received = next(batches)
            with batches.next_ids_ahead():
                loss = train_step(batch.numerical, batch.categorical, batch.label, np.float32(batch.global_rows),
                                  np.int64(batch.first_row), *ids_received)
                float(loss)  # the step is done before the batch's arrays go back to the reader
            batch.release()
            if i >= cfg.benchmark_warmup_steps:
                rows += batch.global_rows
        parts.group.barrier()
    seconds = time.perf_counter() - started
    result = RunResult(mode="train", step=total_steps, seconds=seconds,
                       samples_per_sec=rows / seconds,
                       extra={"global_batch_size": parts.config.data.global_batch_size,
                              "timed_steps": cfg.benchmark_steps})
    log.event("train_benchmark", result.step, samples_per_sec=result.samples_per_sec, **result.extra)
    log.message(f"training: {result.samples_per_sec:,.0f} samples/s over {cfg.benchmark_steps} steps of "
                f"{parts.config.data.global_batch_size} rows (after {cfg.benchmark_warmup_steps} warmup steps)")
    return result
