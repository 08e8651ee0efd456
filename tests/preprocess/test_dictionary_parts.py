"""The Spark-free parts of the dictionary: per-task value counts, numbering, and the writers' id lookup."""
from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from preproc_spark3.dictionary import IdLookup, ValueCounter, build_feature, one_row_warnings, write_feature


def _categorical(c1, c2):
    values = np.full((len(c1), 26), -1, dtype=np.int64)
    values[:, 0], values[:, 1] = c1, c2
    return values


def test_counter_merges_blocks_and_skips_missing_values():
    counter = ValueCounter()
    counter.add(_categorical([7, 7, 2**32 - 1], [-1, 3, 3]))
    counter.add(_categorical([2**32 - 1, 7], [3, -1]))
    values, counts = counter.counts(0)
    assert dict(zip(values.tolist(), counts.tolist())) == {7: 3, 2**32 - 1: 2}
    values, counts = counter.counts(1)
    assert dict(zip(values.tolist(), counts.tolist())) == {3: 3}
    assert len(counter.counts(2)[0]) == 0


def test_ids_by_descending_count_then_value_above_the_threshold():
    parts = [(np.array([5, 9, 2**32 - 1]), np.array([2, 1, 4])), (np.array([1, 9]), np.array([1, 3]))]
    dictionary = build_feature(parts, threshold=2)  # totals: 5 -> 2, 9 -> 4, max -> 4, 1 -> 1 (dropped)
    assert dict(zip(dictionary.values.tolist(), dictionary.ids.tolist())) == {9: 1, 2**32 - 1: 2, 5: 3}
    assert dictionary.cardinality == 4
    assert build_feature([], threshold=0).cardinality == 1


def test_lookup_gives_ids_of_kept_values_and_zero_for_missing_and_unseen(tmp_path):
    parquet, arrays = tmp_path / "parquet", tmp_path / "arrays"
    parquet.mkdir()
    arrays.mkdir()
    write_feature(build_feature([(np.array([5, 9, 2**32 - 1]), np.array([4, 4, 9]))], 0), 0, str(parquet), str(arrays))
    write_feature(build_feature([], 0), 1, str(parquet), str(arrays))
    lookup = IdLookup.open(str(arrays), features=2)
    raw = np.array([5, -1, 2**32 - 1, 6, 9, 0])
    np.testing.assert_array_equal(lookup.ids(0, raw), [2, 0, 1, 0, 3, 0])
    np.testing.assert_array_equal(lookup.ids(1, raw), [0] * 6)  # a feature with no kept value
    table = pq.read_table(parquet / "part-00000.parquet").to_pydict()  # the readers' parquet: rows in id order
    assert table == {"feature": [0, 0, 0], "value": [2**32 - 1, 5, 9], "count": [9, 4, 4], "id": [1, 2, 3]}


def test_lookup_of_a_large_table_matches_a_dict(tmp_path):
    rng = np.random.default_rng(1)
    values = np.unique(rng.integers(0, 2**32, 6000))
    dictionary = build_feature([(values, rng.integers(1, 50, len(values)))], threshold=10)
    write_feature(dictionary, 0, str(tmp_path), str(tmp_path))
    query = np.concatenate([rng.choice(values, 3000), rng.integers(0, 2**32, 100), [-1, -1]])
    expected = dict(zip(dictionary.values.tolist(), dictionary.ids.tolist()))
    got = IdLookup.open(str(tmp_path), features=1).ids(0, query)
    np.testing.assert_array_equal(got, [expected.get(v, 0) for v in query.tolist()])
    assert len(dictionary.values) > 4096  # the sorted-query path


def test_one_row_tables_are_warned_of_with_their_cause():
    """Thresholds 0 and 1 keep every value seen: a one-row table then means the feature was never seen."""
    warnings = one_row_warnings([1, 5, 1, 1], (15, 15, 1, 0), ("C1", "C2", "C3", "C4"))
    assert warnings == [
        "feature C1: every value is seen fewer than 15 times (its --frequency_threshold), so its table has 1 row "
        "and the feature carries no information; lower its threshold with an override in --frequency_threshold "
        "(e.g. C1:1)",
        "feature C3: every value is missing from the days the dictionary counts, so its table has 1 row and the "
        "feature carries no information",
        "feature C4: every value is missing from the days the dictionary counts, so its table has 1 row and the "
        "feature carries no information"]
