"""A small split-binary dataset mixing one-hot, multi-hot, numerical features and a group id."""
import numpy as np

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import write_split_binary

ONE_HOT = [5, 300, 40000]  # int8, int16, int32 ids
MULTI_HOT = {"topics": (40, 3), "history": (70000, 5), "single": (129, 1)}  # name -> (cardinality, max_hotness)
TOTAL_HOTNESS = len(ONE_HOT) + sum(h for _, h in MULTI_HOT.values())
NUM_NUMERICAL = 2


def mixed_spec(mappings=("train",)) -> FeatureSpec:
    return FeatureSpec.criteo_like(ONE_HOT, NUM_NUMERICAL, mappings=mappings, multi_hot=MULTI_HOT,
                                   group="display_id")


def random_bags(rng, n: int, card: int, hotness: int) -> np.ndarray:
    """[n, hotness] ids with a random count per row (0 .. hotness), -1 padded; row 0 empty, row 1 full
    of the largest id."""
    bags = np.full((n, hotness), -1, np.int64)
    counts = rng.integers(0, hotness + 1, n)
    for r in range(n):
        bags[r, :counts[r]] = rng.integers(0, card, counts[r])
    if n >= 2:
        bags[0], bags[1] = -1, card - 1
    return bags


def mixed_rows(n: int, seed: int = 0):
    """(label, numerical, categorical [n, TOTAL_HOTNESS] in table order, group)."""
    rng = np.random.default_rng(seed)
    label = rng.random(n) < 0.4
    numerical = rng.normal(0.0, 2.0, (n, NUM_NUMERICAL)).astype(np.float16)
    onehot = [rng.integers(0, card, (n, 1)) for card in ONE_HOT]
    multi = [random_bags(rng, n, card, hotness) for card, hotness in MULTI_HOT.values()]
    group = np.sort(rng.integers(0, 2**40, n))
    return label, numerical, np.concatenate(onehot + multi, axis=1), group


def write_mixed(root, n: int, seed: int = 0, mappings=("train",)):
    """Write and reload the dataset; returns (spec, {mapping: rows})."""
    spec, data = mixed_spec(mappings), {}
    for k, mapping in enumerate(mappings):
        data[mapping] = mixed_rows(n, seed + k)
        write_split_binary(str(root), spec, mapping, *data[mapping])
    spec.save(str(root))
    return FeatureSpec.load(str(root)), data
