"""`run(config)`: start the process group, take the run directory, find (or generate) the dataset and check
it, then hand over to `dlrm.train.modes`, which builds the parts and runs the mode.

Everything up to the data check works without TensorFlow on the MPI backend (the current stack's choice,
for one process too), and TensorFlow is imported only after it: a run refused for its data, its run
directory or its predictions path costs a second, not TensorFlow's start-up. Under Horovod (the Horovod
stack's choice), whose collectives are TensorFlow ops, TensorFlow is configured first.

The same code runs with one process and with N ranks: the process group started here is passed to
everything rank-dependent (the embedding layer, the reader's slice of each batch, checkpoints, the
per-step agreement, the metrics log's rank-0 check).
"""
from __future__ import annotations

import os
from typing import Optional

from dlrm import dist
from dlrm.checkpoint_layout import find_checkpoint
from dlrm.config import Config, TrainConfig
from dlrm.errors import PathError
from dlrm.train.after_training import AfterTraining
from dlrm.train.dataset import check_data, prepare_dataset
from dlrm.train.metrics_log import MetricsLog
from dlrm.train.predictions import PredictionsPathError, path_problem
from dlrm.train.result import RunResult


def check_predictions_path(path: Optional[str], group: dist.ProcessGroup) -> None:
    """Refuse a --predictions_path rank 0 cannot write before anything else runs, on every rank alike."""
    if not path:
        return
    group.raise_if_any_failed(path_problem(path) if group.rank == 0 else None, PredictionsPathError,
                              name="predictions_path_agree")


def records_of(train_cfg: TrainConfig) -> dict:
    """Whose records a run writes (`MetricsLog`'s owner and continuing): a training run's are its checkpoint
    root's, continued when it resumes from its own checkpoint; the training benchmark's are its own (no
    checkpoint); evaluations add to the records there."""
    if train_cfg.mode != "train":
        return {}
    root = train_cfg.save_checkpoint_path
    if train_cfg.benchmark or not root:
        return {"owner": ""}
    return {"owner": os.path.realpath(root), "continuing": find_checkpoint(root) is not None}


class RunDirError(PathError):
    """Rank 0 cannot take the run directory (another run holds it, or it cannot be written); every rank stops."""

    on_every_rank = True


def open_log(config: Config, group: dist.ProcessGroup) -> MetricsLog:
    """The run's metrics log, written by rank 0 (`records_of`); a run directory rank 0 cannot take stops every
    rank with its message, none left waiting in a collective."""
    log, problem = None, None
    try:
        log = MetricsLog(config.train.run_dir, enabled=group.rank == 0, **records_of(config.train))
    except PathError as error:
        problem = str(error)
    try:
        group.raise_if_any_failed(problem, RunDirError, name="run_dir_agree")
    except RunDirError:
        if log is not None:
            log.close(plot=False)
        raise
    assert log is not None
    return log


def _configure_tensorflow(config: Config) -> None:
    """TensorFlow's set-up (`build.configure_tensorflow`); importing `build` loads TensorFlow."""
    from dlrm.train.build import configure_tensorflow

    configure_tensorflow(config.train)


def run(config: Config, after_training: Optional[AfterTraining] = None) -> RunResult:
    """Set up, then run `config.train.mode` (then `after_training`, in train mode). Raises a UserError
    (NonFiniteLossError, CheckpointError, DataError, Interrupted, PeerRankFailed, ...) on failure."""
    group = dist.start(config.train.backend)
    # Horovod's collectives, the start-up checks' included, are TensorFlow ops: it is set up before them.
    tensorflow_first = group.needs_tensorflow
    if tensorflow_first:
        _configure_tensorflow(config)
    log = open_log(config, group)
    try:
        check_predictions_path(config.train.predictions_path, group)
        dataset_dir = prepare_dataset(config.data, group, log)
        check_data(config, dataset_dir, group, log)
        if not tensorflow_first:
            _configure_tensorflow(config)
        from dlrm.train.modes import run_mode  # the run's TensorFlow part

        return run_mode(config, group, log, dataset_dir, after_training)
    finally:
        log.close(plot=config.train.mode == "train")
