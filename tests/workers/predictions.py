"""The trainer's own scores of a checkpoint: the eval mode's restore, reader and predict step in one process,
saved in dataset order (labels, logits) for tests/support/serving.py.

    python -m tests.workers.predictions OUT.npz MAIN_PY_FLAGS...   (the flags of the training run)
"""
from __future__ import annotations

import sys

import numpy as np

from dlrm import dist
from dlrm.cli import parse_config
from dlrm.train.build import build_parts, configure_tensorflow, make_reader
from dlrm.train.evaluation import predict_batches
from dlrm.train.restore import restore, restore_source
from dlrm.train.step import make_predict_step


def main(out: str, flags: list) -> None:
    config = parse_config(flags + ["--mode", "eval"])
    configure_tensorflow(config.train)
    parts = build_parts(config, config.data.dataset_dir or config.data.synthetic_dir, dist.single_process(),
                        with_optimizer=False)
    source = restore_source(config.train)
    assert source is not None, "no checkpoint to score"
    restore(parts, source, training=False)
    reader = make_reader(parts, config.data.test_mapping, config.data.eval_batch_size)
    labels, logits = predict_batches(make_predict_step(parts.model), reader)
    np.savez(out, labels=labels, logits=logits)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
