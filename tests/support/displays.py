"""A tiny split-binary dataset with a `map` channel shaped like Outbrain: displays of 2-12 rows, one click each.

Displays mostly sit on consecutive rows, as in Outbrain's files, but a few are interleaved with their
neighbours; display ids are large, unordered and some negative. The click leans on `cat_0` and the first
numerical feature, so a trained model ranks better than chance. Also: independent brute-force metrics and
a reader of the predictions CSV that use nothing but the standard library and numpy.
"""
import csv

import numpy as np

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import write_split_binary

CARDS = [7, 50, 300]
NUM_NUMERICAL = 2


def display_rows(displays: int, seed: int):
    """(label, numerical, categorical, group) of `displays` displays."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 13, displays)
    ids = rng.choice(np.arange(-10**12, 10**12, 7919), displays, replace=False)
    group = np.repeat(ids, sizes)
    n = group.size
    for start in range(0, n - 6, 97):  # interleave a few neighbouring displays
        group[start:start + 6] = group[start:start + 6][[0, 3, 1, 4, 2, 5]]
    numerical = rng.normal(0.0, 1.0, (n, NUM_NUMERICAL)).astype(np.float16)
    categorical = np.stack([rng.integers(0, c, n) for c in CARDS], axis=1)
    appeal = numerical[:, 0].astype(np.float64) + (categorical[:, 0] < 3) + rng.gumbel(size=n)
    label = np.zeros(n, bool)
    for g in ids:  # one click per display: its most appealing ad
        rows = np.flatnonzero(group == g)
        label[rows[np.argmax(appeal[rows])]] = True
    return label, numerical, categorical, group


def write_display_dataset(root, train_displays: int = 300, test_displays: int = 120, seed: int = 0) -> str:
    spec = FeatureSpec.criteo_like(CARDS, NUM_NUMERICAL, mappings=("train", "test"), group="display_id")
    for k, (mapping, displays) in enumerate((("train", train_displays), ("test", test_displays))):
        write_split_binary(str(root), spec, mapping, *display_rows(displays, seed + k))
    spec.save(str(root))
    return str(root)


def read_predictions(path):
    """The predictions CSV as (header, group ids (None if empty), labels, logits as float32, probabilities)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    groups = None if body and body[0][0] == "" else np.array([int(r[0]) for r in body], np.int64)
    labels = np.array([int(r[1]) for r in body])
    logits = np.array([np.float32(r[2]) for r in body], np.float32)
    probabilities = np.array([float(r[3]) for r in body])
    return header, groups, labels, logits, probabilities


def brute_force_auc(labels, scores) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def brute_force_map(groups, labels, scores, k=12) -> float:
    """Per group: sort rows by score descending, clicked rows after unclicked ones on a tie, then AP@k."""
    aps = []
    for g in sorted(set(groups.tolist())):
        rows = [(float(s), int(y)) for gg, y, s in zip(groups, labels, scores) if gg == g]
        clicks = sum(y for _, y in rows)
        if clicks == 0:
            continue
        rows.sort(key=lambda r: (-r[0], r[1]))
        hits, total = 0, 0.0
        for position, (_, y) in enumerate(rows[:k], start=1):
            if y:
                hits += 1
                total += hits / position
        aps.append(total / min(clicks, k))
    return float(np.mean(aps)) if aps else float("nan")
