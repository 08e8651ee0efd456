"""Quality target: a short CPU training on the tiny synthetic preset reaches >= 0.97 x the Bayes-optimal
AUC recorded by the generator. This is exactly the embedded demo (`python main.py`): the tiny preset,
1,048,576 training rows, one epoch of 512 steps of 2048 rows."""
import time

import pytest

from dlrm.cli import parse_config
from dlrm.train.run import run

TARGET = 0.97


@pytest.mark.slow
def test_tiny_synthetic_reaches_97_percent_of_bayes_auc(tmp_path):
    config = parse_config(["--synthetic_dir", str(tmp_path / "data"), "--run_dir", str(tmp_path / "run"),
                           "--intra_op_threads", "2"])
    started = time.time()
    result = run(config)
    seconds = time.time() - started
    print(f"AUC {result.auc:.5f} vs Bayes-optimal {result.bayes_auc:.5f} "
          f"(ratio {result.auc / result.bayes_auc:.4f}) after {result.step} steps in {seconds:.0f} s")
    assert result.auc >= TARGET * result.bayes_auc
