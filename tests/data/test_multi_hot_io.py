"""Multi-hot features and the group id in split-binary files: the writer's layout and checks."""
import os

import numpy as np
import pytest

from dlrm.data.binary import SplitBinaryWriter, write_split_binary
from dlrm.data.errors import DataError
from tests.data.mixed_dataset import mixed_rows, mixed_spec, write_mixed


def test_writer_layout_is_max_hotness_values_per_row_padded_with_minus_one(tmp_path):
    spec, data = write_mixed(tmp_path, 50)
    _, _, categorical, group = data["train"]
    topics = np.fromfile(tmp_path / "train" / "cat_3.bin", np.int8).reshape(50, 3)
    history = np.fromfile(tmp_path / "train" / "cat_4.bin", np.int32).reshape(50, 5)
    single = np.fromfile(tmp_path / "train" / "cat_5.bin", np.int16)
    np.testing.assert_array_equal(topics, categorical[:, 3:6])
    np.testing.assert_array_equal(history, categorical[:, 6:11])
    np.testing.assert_array_equal(single, categorical[:, 11])
    assert (topics[0] == -1).all() and (topics[1] == 39).all()
    np.testing.assert_array_equal(np.fromfile(tmp_path / "train" / "group.bin", np.int64), group)
    spec.validate()


def test_per_table_arrays_write_the_same_files(tmp_path):
    label, numerical, categorical, group = mixed_rows(30)
    spec = mixed_spec()
    write_split_binary(str(tmp_path / "a"), spec, "train", label, numerical, categorical, group)
    tables = [categorical[:, 0], categorical[:, 1], categorical[:, 2], categorical[:, 3:6],
              categorical[:, 6:11], categorical[:, 11]]
    write_split_binary(str(tmp_path / "b"), spec, "train", label, numerical, tables, group)
    for name in sorted(os.listdir(tmp_path / "a" / "train")):
        assert (tmp_path / "a" / "train" / name).read_bytes() == (tmp_path / "b" / "train" / name).read_bytes()


@pytest.fixture
def writer(tmp_path):
    writer = SplitBinaryWriter(str(tmp_path), mixed_spec(), "train")
    writer.write(*mixed_rows(20))  # errors count rows across chunks
    yield writer
    writer.abort()


@pytest.mark.parametrize("column, row, values, feature, file, why", [
    (6, 4, [3, -1, 7, -1, -1], "history", "cat_4.bin",
     "padding -1 at position 1 of the row [3, -1, 7, -1, -1] is followed by an id"),
    (3, 2, [1, 40, -1], "topics", "cat_3.bin", "id 40 at position 1 of the row [1, 40, -1] is outside [0, 40)"),
    (3, 7, [-2, -1, -1], "topics", "cat_3.bin", "id -2 at position 0 of the row [-2, -1, -1] is outside [0, 40)"),
    (1, 5, [-1], "cat_1", "cat_1.bin", "id -1 is outside [0, 300)"),
])
def test_writer_names_file_feature_and_row_of_a_bad_bag(writer, column, row, values, feature, file, why):
    label, numerical, categorical, group = mixed_rows(10, seed=1)
    categorical[row, column:column + len(values)] = values
    with pytest.raises(DataError) as caught:
        writer.write(label, numerical, categorical, group)
    assert (caught.value.feature, caught.value.row) == (feature, 20 + row)
    assert caught.value.file.endswith(os.path.join("train", file))
    assert why in str(caught.value)
    assert writer.rows_written == 20


def test_writer_refuses_wrong_shapes_and_a_missing_group(writer):
    label, numerical, categorical, group = mixed_rows(10, seed=1)
    with pytest.raises(DataError, match=r"shape \(10, 11\), expected \(10, 12\)"):
        writer.write(label, numerical, categorical[:, :11], group)
    tables = [categorical[:, 0], categorical[:, 1], categorical[:, 2], categorical[:, 3:5],
              categorical[:, 6:11], categorical[:, 11]]
    with pytest.raises(DataError, match=r"'topics'.*shape \(10, 2\), expected \(10, 3\)"):
        writer.write(label, numerical, tables, group)
    with pytest.raises(DataError, match="'display_id'.*group ids must be 10 integers"):
        writer.write(label, numerical, categorical)
    assert writer.rows_written == 20
