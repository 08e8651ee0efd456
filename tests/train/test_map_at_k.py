"""Exact MAP@12 against a brute-force implementation written from the definition."""
from __future__ import annotations

import numpy as np
import pytest

from dlrm.exact_metrics import map_at_k
from tests.support.displays import brute_force_map


@pytest.mark.parametrize("seed", range(12))
def test_map_equals_brute_force_with_ties_and_several_clicks(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    groups = rng.integers(0, max(1, n // 5), size=n).astype(np.int64) * 7919 - 50  # sparse, negative ids too
    labels = (rng.random(n) < rng.uniform(0.05, 0.6)).astype(np.float32)
    scores = rng.integers(0, 4, size=n).astype(np.float32)  # few levels: many ties
    expected = brute_force_map(groups, labels, scores)
    got = map_at_k(groups, labels, scores)
    if np.isnan(expected):
        assert np.isnan(got)
    else:
        assert got == pytest.approx(expected, abs=1e-12)


def test_one_click_per_group_is_mean_reciprocal_rank_cut_at_k():
    groups = np.repeat(np.arange(3), 14)
    scores = np.tile(np.arange(14, 0, -1), 3).astype(np.float32)  # row i of a group ranks i + 1
    labels = np.zeros(42, np.float32)
    labels[[0, 14 + 3, 28 + 12]] = 1  # ranks 1, 4, 13 (beyond 12: 0)
    assert map_at_k(groups, labels, scores) == pytest.approx((1 + 1 / 4 + 0) / 3)


def test_ties_count_against_the_click_and_row_order_does_not_matter():
    groups = np.array([5, 5, 5, 9, 9])
    labels = np.array([0, 1, 0, 1, 0], np.float32)
    scores = np.zeros(5, np.float32)  # everything tied: clicked rows rank last
    assert map_at_k(groups, labels, scores) == pytest.approx((1 / 3 + 1 / 2) / 2)
    perm = np.array([4, 2, 0, 3, 1])
    assert map_at_k(groups[perm], labels[perm], scores[perm]) == map_at_k(groups, labels, scores)


def test_groups_without_clicks_do_not_count_and_no_click_at_all_is_nan():
    assert map_at_k([1, 1, 2, 2], [0, 1, 0, 0], [0.1, 0.9, 0.5, 0.2]) == 1.0
    assert np.isnan(map_at_k([1, 2], [0, 0], [0.1, 0.2]))


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="must match"):
        map_at_k([1, 2], [0, 1, 1], [0.1, 0.2, 0.3])
