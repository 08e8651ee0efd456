"""The Spark-free parts of the dictionary: per-task value counts and the writers' id lookup."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from preproc_spark3.config import CATEGORICAL_COLUMNS
from preproc_spark3.dictionary import VALUE_OFFSET, IdLookup, ValueCounter


def _parsed(days, reasons, c1, c2):
    columns = {"day": pa.array(days, pa.int32()), "reason": pa.array(reasons, pa.string())}
    columns.update({name: pa.array([None] * len(days), pa.int64()) for name in CATEGORICAL_COLUMNS})
    columns["C1"], columns["C2"] = pa.array(c1, pa.int64()), pa.array(c2, pa.int64())
    return pa.RecordBatch.from_pydict(columns)


def test_counter_merges_batches_and_counts_only_well_formed_rows_of_the_dictionary_days():
    counter = ValueCounter((0, 1))
    counter.add(_parsed([0, 0, 1, 2], [None, None, None, None], [7, 7, 2**32 - 1, 7], [None, 3, 3, 3]))
    counter.add(_parsed([1, 1], [None, "bad"], [2**32 - 1, 7], [3, 3]))  # the malformed row does not count
    table = counter.table().to_pydict()
    got = {(f, v): c for f, v, c in zip(table["feature"], table["value"], table["count"])}
    assert got == {(0, 7): 2, (0, 2**32 - 1): 2, (1, 3): 3}


def test_lookup_gives_ids_of_kept_values_and_zero_for_missing_and_unseen(tmp_path):
    pq.write_table(pa.table({"feature": pa.array([0, 0, 0, 1], pa.int32()),
                             "value": pa.array([2**32 - 1, 5, 9, 5], pa.int64()),
                             "count": pa.array([9, 4, 4, 2], pa.int64()), "id": pa.array([1, 2, 3, 1], pa.int32())}),
                   tmp_path / "part-0.parquet")
    lookup = IdLookup.read(str(tmp_path), [0, 2])
    raw = [5, None, 2**32 - 1, 6, 9, 0]
    shifted = pa.array([None if v is None else v - VALUE_OFFSET for v in raw], pa.int32())
    np.testing.assert_array_equal(lookup.ids(0, shifted), [2, 0, 1, 0, 3, 0])
    np.testing.assert_array_equal(lookup.ids(2, shifted), [0] * 6)  # a feature with no kept value
    assert sorted(lookup.tables) == [0, 2]
