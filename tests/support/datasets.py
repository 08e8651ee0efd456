"""Small split-binary datasets written with the project's own writer, and in-place damage to them."""
import os

import numpy as np

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import write_split_binary

# 26 tables covering every stored id width: int8 (<= 128), int16 (<= 32768), int32.
CARDS = [3, 128, 129, 40000, 5, 1000, 70000, 2, 32768, 32769, 11, 60, 4, 300, 17, 100,
         4, 900, 15, 2000, 250, 7000, 300, 650, 90, 35]


def random_rows(n, cards=CARDS, seed=0, num_numerical=13):
    """Random rows that exercise the edges: ids 0 and cardinality-1, float16 subnormals, -0, max."""
    rng = np.random.default_rng(seed)
    label = rng.random(n) < 0.3
    numerical = rng.normal(0.0, 3.0, size=(n, num_numerical)).astype(np.float16)
    specials = np.array([0.0, -0.0, 6e-8, -6e-8, 1e-5, 65504.0, -65504.0, 0.5], dtype=np.float16)
    numerical.flat[: min(specials.size, numerical.size)] = specials[: numerical.size]
    categorical = np.stack([rng.integers(0, c, n) for c in cards], axis=1).astype(np.int64)
    if n >= 2:
        categorical[0] = 0
        categorical[1] = np.asarray(cards) - 1
    return label, numerical, categorical


def make_dataset(root, n_rows, cards=CARDS, mappings=("train",), seed=0, num_numerical=13):
    """Write a dataset under `root`; returns (loaded spec, {mapping: (label, numerical, categorical)})."""
    spec = FeatureSpec.criteo_like(cards, num_numerical, mappings=mappings)
    data = {}
    for k, mapping in enumerate(mappings):
        rows = n_rows[k] if isinstance(n_rows, (list, tuple)) else n_rows
        data[mapping] = random_rows(rows, cards, seed + k, num_numerical)
        write_split_binary(str(root), spec, mapping, *data[mapping])
    spec.metadata["num_rows"] = {m: int(data[m][0].shape[0]) for m in mappings}
    spec.save(str(root))
    return FeatureSpec.load(str(root)), data


def poke(path, dtype, index, value):
    """Overwrite one value of a file in place (mappings of the file stay valid)."""
    data = np.memmap(path, dtype=dtype, mode="r+")
    data[index] = value
    data.flush()
    del data


def files_of(root):
    """{relative path: bytes} of every file under `root`."""
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, names in os.walk(root) for f in names}
