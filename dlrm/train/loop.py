"""The training loop: data -> embeddings -> model -> loss -> gradients -> update, plus eval and checkpoints.

Read `train()` top to bottom: restore if there is a checkpoint, then for each step read the batch (all
ranks agree to go on), step, log a throughput window now and then, evaluate and checkpoint every N
steps; at the end write the final checkpoint and evaluate.

Before every step the ranks agree whether to go on (`dlrm.train.stopping`): on a signal or a batch that
cannot be read, all of them checkpoint the last good state and stop at the same step.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Callable, Generator, Optional, Tuple

import numpy as np

from dlrm.data.format.errors import MappingTooSmall
from dlrm.train import stopping
from dlrm.train.build import Parts, make_reader
from dlrm.train.checkpoint.restore import restore, training_source
from dlrm.train.checkpoint.saving import Checkpoints, non_finite_error
from dlrm.train.eval_result import BayesOptimal, EvalMetrics
from dlrm.train.evaluation import evaluate
from dlrm.train.ids_ahead import AHEAD_MESSAGE, StepBatches
from dlrm.train.metrics_log import MetricsLog
from dlrm.train.result import RunResult
from dlrm.train.step import make_predict_step, make_train_step


def every(step: int, n: Optional[int]) -> bool:
    """True every `n` steps (never when `n` is 0 or None)."""
    if not n:
        return False
    return step % n == 0


class ThroughputWindow:
    """Rows, summed loss and time of the steps since the last progress line.

    Time spent in `paused()` (evaluation, checkpoints) does not count in samples/s.
    """

    def __init__(self):
        self.started = self.start = time.perf_counter()
        self.rows, self.loss, self.steps, self.trained_rows = 0, 0.0, 0, 0

    def add(self, rows: int, loss: float) -> None:
        self.rows += rows
        self.loss += loss
        self.steps += 1

    @contextlib.contextmanager
    def paused(self):
        paused = time.perf_counter()
        try:
            yield
        finally:
            self.start += time.perf_counter() - paused

    def close(self) -> tuple:
        """(mean loss, samples/s) of this window; the next one starts now."""
        now = time.perf_counter()
        result = self.loss / self.steps, self.rows / max(now - self.start, 1e-9)
        self.trained_rows += self.rows
        self.rows, self.loss, self.steps, self.start = 0, 0.0, 0, now
        return result

    def total_rows(self) -> int:
        return self.trained_rows + self.rows


class Evaluations:
    """Evaluation between and after steps; remembers the latest metrics for the result.

    The final evaluation also writes `--predictions_path`, if given."""

    def __init__(self, parts: Parts, log: MetricsLog, bayes: BayesOptimal,
                 pending_signal: Callable[[], Optional[int]]):
        self.parts, self.log, self.bayes, self.pending_signal = parts, log, bayes, pending_signal
        self.predict_step = make_predict_step(parts.model)
        self.metrics: Optional[EvalMetrics] = None

    def __call__(self, step: int, final: bool = False) -> None:
        predictions_path = self.parts.config.train.predictions_path if final else None
        self.metrics = evaluate(self.parts, self.predict_step, self.pending_signal, predictions_path)
        self.log.eval(step, self.metrics, self.bayes)


def training_reader(parts: Parts):
    cfg = parts.config
    reader = make_reader(parts, cfg.data.train_mapping, cfg.data.global_batch_size,
                         partial_batch=cfg.data.partial_batch)
    if len(reader) == 0:
        raise MappingTooSmall(f"mapping {cfg.data.train_mapping!r} has no complete global batch of "
                              f"{cfg.data.global_batch_size} rows: lower --global_batch_size, or use "
                              f"--partial_batch keep")
    return reader


def training_batches(reader, step: int, steps_per_epoch: int) -> Generator:
    """The batches for steps `step + 1, step + 2, ...`, epoch after epoch (resumes mid-epoch)."""
    while True:
        with contextlib.closing(reader.iter_from(step % steps_per_epoch)) as batches:  # close stops prefetch
            for batch in batches:
                step += 1
                yield batch


def _resume(parts: Parts, log: MetricsLog) -> Tuple[Optional[str], int]:
    """The checkpoint restored (`training_source`) and the step to continue after, or (None, 0) without one."""
    source, verified = training_source(parts, log.message)
    if not source:
        return None, 0
    meta = restore(parts, source, training=True, verified=verified)
    step = int(meta["step"])
    log.message(f"restored {source} (step {step}, written by {meta['world_size']} rank(s))")
    return source, step


def _stop(agreed: stopping.StopAgreed, step: int, checkpoints: Checkpoints, log: MetricsLog) -> BaseException:
    """Checkpoint the last good state on every rank, say so, and return what this rank raises."""
    note = checkpoints.save_before_stopping(step)
    log.event("stopped", step, reason=agreed.reason())
    if agreed.failed_rank is not None:  # the error's own message does not say what was saved
        log.message(f"{agreed.reason()} after step {step}: stopping; {note}")
    return agreed.final_error(f"after step {step}", note)


def _evaluate_between_steps(evaluations: Evaluations, step: int, checkpoints: Checkpoints, log: MetricsLog) -> None:
    """Evaluate after `step`; if that fails, checkpoint the training done so far where it is safe."""
    try:
        evaluations(step)
    except stopping.StopAgreed as agreed:  # a rank could not read its test data: every rank is here
        raise _stop(agreed, step, checkpoints, log) from None
    except Exception:
        if checkpoints.parts.group.size == 1:  # with N ranks the others may be inside a collective: no checkpoint
            checkpoints.save_before_stopping(step)
        raise


def _log_skipped_rows(reader, step: int, parts: Parts, log: MetricsLog) -> None:
    if reader.rows_skipped:  # --partial_batch drop: say how many rows are never trained on
        log.event("rows_skipped", step, rows=reader.rows_skipped, per="epoch")
        log.message(f"--partial_batch drop: the last {reader.rows_skipped} rows of mapping "
                    f"{parts.config.data.train_mapping!r} are skipped in every epoch")


def train(parts: Parts, log: MetricsLog, bayes: BayesOptimal) -> RunResult:
    """Restore if there is a checkpoint, run the steps (evaluating and checkpointing between them), write
    the final checkpoint, then evaluate. Raises NonFiniteLossError, Interrupted (a signal), the error of a
    batch that could not be read, or PeerRankFailed (another rank's error), each after saving what it can."""
    cfg, group, schedule = parts.config.train, parts.group, parts.training_optimizer().schedule
    reader = training_reader(parts)
    steps_per_epoch = len(reader)
    schedule.set_steps_per_epoch(steps_per_epoch)
    total_steps = cfg.max_steps or math.ceil(cfg.epochs * steps_per_epoch)
    source, step = _resume(parts, log)
    checkpoints = Checkpoints(parts, steps_per_epoch, log, last=source, last_step=step if source else None)
    log.start(total_steps, step)
    _log_skipped_rows(reader, step, parts, log)
    batches = StepBatches(training_batches(reader, step, steps_per_epoch), parts, total_steps - step)
    train_step = make_train_step(parts, ids_received=batches.ids_ahead)
    if batches.ids_ahead:
        log.message(AHEAD_MESSAGE)
    window = ThroughputWindow()
    with contextlib.closing(batches), stopping.StopRequests(group, announce=group.rank == 0) as stop_requests:
        evaluations = Evaluations(parts, log, bayes, lambda: stop_requests.signal_number)
        first_step = step
        while step < total_steps:
            try:
                with group.steady_step(step > first_step):  # the first step may wait for ranks still tracing it
                    batch, ids_received = stop_requests.next_batch(batches)  # all ranks agree to go on, or stop
                    with batches.next_ids_ahead():
                        loss = float(train_step(batch.numerical, batch.categorical, batch.label,
                                                np.float32(batch.global_rows), np.int64(batch.first_row),
                                                *ids_received))
            except stopping.StopAgreed as agreed:  # saved outside the steady step: the save may take long
                raise _stop(agreed, step, checkpoints, log) from None
            batch.release()  # the step is done with the arrays: the reader decodes a later batch into them
            step += 1
            window.add(batch.global_rows, loss)
            if not math.isfinite(loss):
                log.event("stopped", step, reason="non-finite loss", loss=loss)
                raise non_finite_error(f"training loss is {loss}", step, checkpoints.last)
            if every(step, cfg.log_every_steps) or step == total_steps:
                mean_loss, samples_per_sec = window.close()  # lr: the one the last update used
                log.train(step, mean_loss, schedule.value_at(step - 1), samples_per_sec, epoch=step / steps_per_epoch,
                          **schedule.learning_rates_at(step - 1))
            if step == total_steps:
                break
            with window.paused():
                if every(step, cfg.eval_every_steps):
                    _evaluate_between_steps(evaluations, step, checkpoints, log)
                if checkpoints.due(step):
                    checkpoints.save(step)
        seconds = time.perf_counter() - window.started
        final_checkpoint = checkpoints.save_final(step)  # before the final evaluation: a bad test row loses nothing
        try:
            stop_requests.check()  # a signal during the last step: the final evaluation is left to the rerun
            evaluations(step, final=True)
        except stopping.StopAgreed as agreed:
            raise _stop(agreed, step, checkpoints, log) from None
    trained_rows = window.total_rows()
    return RunResult(mode="train", step=step, metrics=evaluations.metrics, bayes=bayes, checkpoint=final_checkpoint,
                     seconds=seconds,
                     samples_per_sec=trained_rows / seconds if seconds > 0 and trained_rows else None)
