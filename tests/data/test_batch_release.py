"""Batch ownership: a batch's arrays are reused only after `release()`, whatever the consumer keeps."""
import numpy as np

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import write_split_binary
from dlrm.data.reader.reader import BatchReader


def small_dataset(root, rows=40):
    spec = FeatureSpec.criteo_like([5, 300], 2, mappings=["train"])
    rng = np.random.default_rng(0)
    categorical = np.stack([rng.integers(0, 5, rows), rng.integers(0, 300, rows)], axis=1)
    write_split_binary(str(root), spec, "train", rng.random(rows) < 0.5, rng.normal(size=(rows, 2)), categorical)
    spec.metadata["num_rows"] = {"train": rows}
    spec.save(str(root))
    return FeatureSpec.load(str(root)), categorical


def test_kept_batches_stay_intact_while_released_ones_are_reused(tmp_path):
    """Inline, the pool holds two sets: the consumer keeps the first three batches (never released) and
    releases the others, twice each; the kept ones keep their values and the rest share one set."""
    spec, categorical = small_dataset(tmp_path)
    kept, addresses = [], set()
    for batch in BatchReader(spec, "train", 4, prefetch=0):
        if batch.index < 3:
            kept.append(batch)
            continue
        addresses.add(batch.categorical.ctypes.data)
        np.testing.assert_array_equal(batch.categorical, categorical[batch.first_row:batch.first_row + 4])
        batch.release()
        batch.release()  # a second call does nothing
    for batch in kept:
        np.testing.assert_array_equal(batch.categorical, categorical[batch.first_row:batch.first_row + 4])
    assert len(addresses) == 1
