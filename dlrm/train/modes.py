"""The modes of a run on its checked dataset (`dlrm.train.run`): build the parts, then train, evaluate a
checkpoint, or time forward passes (`--mode inference_benchmark`)."""
from __future__ import annotations

import contextlib
import time
from typing import Generator, Optional, cast

import numpy as np
import tensorflow as tf

from dlrm import dist
from dlrm.checkpoint_layout import restore_source
from dlrm.config import Config
from dlrm.cpu_info import cpu_flags, native_bf16
from dlrm.data.format.errors import MappingTooSmall
from dlrm.model import precision
from dlrm.model.size import parameter_count
from dlrm.train import checkpoint, stopping
from dlrm.train.after_training import AfterTraining
from dlrm.train.benchmark import train_benchmark
from dlrm.train.build import Parts, build_parts, make_reader
from dlrm.train.checkpoint.restore import restore
from dlrm.train.checkpoint.saving import checkpoint_dir_lock
from dlrm.train.eval_result import BayesOptimal, final_text
from dlrm.train.evaluation import evaluate
from dlrm.train.loop import train
from dlrm.train.metrics_log import MetricsLog
from dlrm.train.result import RunResult
from dlrm.train.step import make_predict_step


def evaluate_checkpoint(parts: Parts, log: MetricsLog, bayes: BayesOptimal) -> RunResult:
    """--mode eval: restore the weights (no optimizer state) and evaluate on the test mapping."""
    source = restore_source(parts.config.train)
    if source is None:
        raise checkpoint.CheckpointError("--mode eval found no checkpoint to evaluate")
    step = int(restore(parts, source, training=False)["step"])
    started = time.perf_counter()
    try:
        metrics = evaluate(parts, make_predict_step(parts.model), predictions_path=parts.config.train.predictions_path)
    except stopping.StopAgreed as agreed:
        raise agreed.final_error() from None
    log.eval(step, metrics, bayes)
    return RunResult(mode="eval", step=step, metrics=metrics, bayes=bayes, checkpoint=source,
                     seconds=time.perf_counter() - started)


def _benchmark_batches(parts: Parts, needed: int) -> list:
    """Up to `needed` test batches, read before the timing starts: the timing covers the model only."""
    data = parts.config.data
    batches = []
    batches_of_reader = cast(Generator, iter(make_reader(parts, data.test_mapping, data.eval_batch_size)))
    with contextlib.closing(batches_of_reader) as reader:
        for batch in reader:
            batches.append(batch)
            if len(batches) == needed:
                break
    if not batches:
        raise MappingTooSmall(f"mapping {data.test_mapping!r} is empty: nothing to benchmark")
    return batches


def inference_benchmark(parts: Parts, log: MetricsLog) -> RunResult:
    """--mode inference_benchmark: forward passes over test batches; global samples/s and latency."""
    train_cfg, data = parts.config.train, parts.config.data
    source = restore_source(train_cfg)
    step = int(restore(parts, source, training=False)["step"]) if source else 0
    predict_step = make_predict_step(parts.model)
    needed = train_cfg.benchmark_warmup_steps + train_cfg.benchmark_steps
    batches = _benchmark_batches(parts, needed)
    latencies, rows = [], 0
    for i in range(needed):
        batch = batches[i % len(batches)]
        begin = time.perf_counter()
        predict_step(tf.convert_to_tensor(batch.numerical), tf.convert_to_tensor(batch.categorical)).numpy()
        parts.group.barrier()
        if i >= train_cfg.benchmark_warmup_steps:
            latencies.append(time.perf_counter() - begin)
            rows += batch.global_rows
    seconds = float(np.sum(latencies))
    result = RunResult(mode="inference_benchmark", step=step, checkpoint=source, seconds=seconds,
                       samples_per_sec=rows / seconds,
                       extra={"median_batch_ms": 1000 * float(np.median(latencies)),
                              "p90_batch_ms": 1000 * float(np.percentile(latencies, 90)),
                              "global_batch_size": data.eval_batch_size, "timed_batches": len(latencies)})
    log.event("inference_benchmark", step, samples_per_sec=result.samples_per_sec, **result.extra)
    log.message(f"inference: {result.samples_per_sec:,.0f} samples/s, median {result.extra['median_batch_ms']:.2f} ms "
                f"per global batch of {data.eval_batch_size} ({len(latencies)} timed batches)")
    return result


def _run_mode(parts: Parts, log: MetricsLog, bayes: BayesOptimal, after_training: Optional[AfterTraining]) -> RunResult:
    mode = parts.config.train.mode
    if mode == "train" and parts.config.train.benchmark:
        return train_benchmark(parts, log)
    if mode == "train":
        if after_training:
            after_training.check()
        with checkpoint_dir_lock(parts):  # checked and locked before training, held to the end
            result = train(parts, log, bayes)
        if after_training and result.checkpoint and parts.group.rank == 0:
            after_training.finish(result.checkpoint, parts.spec.base_directory, log)
        return result
    if mode == "eval":
        return evaluate_checkpoint(parts, log, bayes)
    if mode == "inference_benchmark":
        return inference_benchmark(parts, log)
    raise ValueError(f"unknown mode {mode!r}")


def log_features(parts: Parts, dataset_dir: str, log: MetricsLog) -> None:
    """The start-up lines and the `features` record of the metrics log: the dataset's tables by name."""
    contract, config = parts.contract, parts.config
    log.message(f"{config.model.arch} on {dataset_dir}: {contract.num_numerical} numerical features, "
                f"{contract.num_tables} tables ({sum(t.rows for t in contract.tables):,} rows), world size "
                f"{parts.group.size} ({parts.group.backend}), mode {config.train.mode}")
    log.message("tables: " + ", ".join(
        f"{t.name} ({t.rows:,} x {t.dim}" + (f", {t.hotness}-hot {t.combiner}" if t.multi_hot else "") + ")"
        for t in contract.tables))
    log.message(f"{parameter_count(parts.model):,} trainable parameters ({len(parts.embeddings.tables)} embedding "
                f"tables, {sum(t.dim for t in parts.embeddings.tables)} values per row)")
    log.event("features", 0, numerical=list(contract.numerical), tables=checkpoint.table_records(contract))
    flags = cpu_flags()
    amp_note = precision.amp_note(config.train.amp, flags)
    if amp_note:
        log.message(amp_note)
        dtype = precision.compute_dtype(True)
        log.event("precision", 0, compute_dtype=dtype.name,
                  **({"native_bf16": native_bf16(flags)} if dtype == tf.bfloat16 else {}))


def run_mode(config: Config, group: dist.ProcessGroup, log: MetricsLog, dataset_dir: str,
             after_training: Optional[AfterTraining] = None) -> RunResult:
    """Build the run's parts on a checked dataset (`dlrm.train.run`), then run `config.train.mode`."""
    reads_a_checkpoint = config.train.mode != "train" and restore_source(config.train) is not None
    parts = build_parts(config, dataset_dir, group, with_optimizer=config.train.mode == "train",
                        restored=reads_a_checkpoint)
    bayes = BayesOptimal.of(parts.spec.metadata) if not config.data.dataset_dir else BayesOptimal()
    log_features(parts, dataset_dir, log)
    result = _run_mode(parts, log, bayes, after_training)
    if result.metrics is not None:
        log.message(final_text(result.metrics, bayes, result.step))
    return result
