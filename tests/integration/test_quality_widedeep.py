"""Wide & Deep quality: the embedded W&D demo (`python main.py --arch widedeep`: the `widedeep_tiny`
synthetic click log, its pair effects crossed in the wide part, 2.5 epochs on 2 CPU cores) reaches >= 0.95 x
the Bayes-optimal MAP@12 recorded by the generator, and the wide part alone (`--model_type wide`, same data,
same flags and budget) scores clearly below it: it cannot represent the request x ad interactions. The deep
part alone (which does not learn the random per-pair effects the crossed features hold) is measured, not
re-run here: 2 more minutes of CI for a deterministic figure (docs/data.md)."""
import time

import pytest

from dlrm.cli import parse_config
from dlrm.train.run import run

TARGET = 0.95
# How far below Wide & Deep the wide part alone must land (MAP@12; measured 0.039: docs/data.md).
PART_ALONE_GAP = {"wide": 0.025}


def _train(tmp_path, model_type: str):
    config = parse_config(["--arch", "widedeep", "--model_type", model_type,
                           "--synthetic_dir", str(tmp_path / "data"), "--run_dir", str(tmp_path / model_type),
                           "--intra_op_threads", "2", "--skip_data_validation"])  # the generator's own data
    started = time.time()
    result = run(config)
    print(f"{model_type}: MAP@12 {result.map_at_12:.5f} vs Bayes-optimal {result.bayes.map_at_12:.5f} "
          f"(ratio {result.map_at_12 / result.bayes.map_at_12:.4f}), AUC {result.auc:.5f}, "
          f"{result.step} steps in {time.time() - started:.0f} s")
    return result


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("widedeep_quality")
    return {model_type: _train(tmp_path, model_type) for model_type in ("wide_n_deep", "wide")}


@pytest.mark.slow
def test_widedeep_demo_reaches_95_percent_of_bayes_map(results):
    result = results["wide_n_deep"]
    assert result.map_at_12 >= TARGET * result.bayes.map_at_12


@pytest.mark.slow
@pytest.mark.parametrize("part", ["wide"])
def test_the_wide_part_alone_scores_clearly_below_wide_and_deep(results, part):
    assert results[part].map_at_12 < results["wide_n_deep"].map_at_12 - PART_ALONE_GAP[part]
