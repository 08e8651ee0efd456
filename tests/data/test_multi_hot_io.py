"""Multi-hot features and the group id in split-binary files: the writer's layout and checks, the reader's
batches (contract order, -1 padding kept, group ids) and its value checks."""
import os

import numpy as np
import pytest

from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import SplitBinaryWriter, write_split_binary
from dlrm.data.reader.reader import BatchReader
from dlrm.data.reader.validate import check_mappings
from tests.data.mixed_dataset import TOTAL_HOTNESS, mixed_rows, mixed_spec, write_mixed
from tests.support.datasets import make_dataset, poke


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


# ----------------------------------------------------------------------------- reading
@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("threads, prefetch", [(1, 0), (2, 0), (2, 3)])
def test_reader_returns_every_row_in_contract_order_with_padding_and_group(tmp_path, world_size, threads, prefetch,
                                                                           decode_kernels):
    spec, data = write_mixed(tmp_path, 103)
    label, numerical, categorical, group = data["train"]
    for rank in range(world_size):
        reader = BatchReader(spec, "train", 20, rank=rank, world_size=world_size, prefetch=prefetch, threads=threads)
        assert reader.total_hotness == TOTAL_HOTNESS == categorical.shape[1]
        for batch in reader:
            rows = slice(batch.first_row, batch.first_row + batch.label.shape[0])
            assert batch.categorical.dtype == np.int32 and batch.group.dtype == np.int64
            np.testing.assert_array_equal(batch.categorical, categorical[rows])
            np.testing.assert_array_equal(batch.group, group[rows])
            np.testing.assert_array_equal(batch.label, label[rows])
            np.testing.assert_array_equal(batch.numerical, numerical[rows].astype(np.float32))
            batch.release()


def test_a_spec_without_map_gives_no_group(tmp_path):
    spec, data = make_dataset(tmp_path, 10, cards=[5, 7], num_numerical=1)
    assert next(iter(BatchReader(spec, "train", 4))).group is None


# (file, dtype, index in the file, value, feature, row, message or None when an earlier one stays reported)
BAD_BAGS = [
    ("cat_4.bin", np.int32, 90 * 5 + 4, 70000, "history", 90, "id 70000 at position 4 of the row [1, 2, 3, 4, 70000]"),
    ("cat_3.bin", np.int8, 60 * 3, -1, "topics", 60, "padding -1 at position 0 of the row [-1, 6, -1]"),
    ("cat_5.bin", np.int16, 60, -5, "single", 60, None),  # same row, higher table: not reported
    ("cat_3.bin", np.int8, 30 * 3 + 0, -7, "topics", 30, "id -7 at position 0 of the row"),
    ("cat_1.bin", np.int16, 30, -1, "cat_1", 30, "id -1 is outside [0, 300)"),  # same row, lower table
]


@pytest.mark.parametrize("threads", [1, 2])
def test_bad_multi_hot_values_name_file_feature_and_row(tmp_path, threads, decode_kernels):
    spec, data = write_mixed(tmp_path, 100)
    categorical = data["train"][2]
    categorical[60, 3:6] = [5, 6, -1]  # so that a -1 poked at position 0 comes before an id
    categorical[90, 6:11] = [1, 2, 3, 4, 5]  # a full row: an id poked at the end follows no padding
    write_split_binary(str(tmp_path), spec, "train", data["train"][0], data["train"][1], data["train"][2],
                       data["train"][3])
    expected = None
    for file, dtype, index, value, feature, row, message in BAD_BAGS:
        poke(tmp_path / "train" / file, dtype, index, value)
        if message is not None:
            expected = (str(tmp_path / "train" / file), feature, row, message)
        reopened = FeatureSpec.load(str(tmp_path))
        for read in (lambda: BatchReader(reopened, "train", 100, prefetch=0, threads=threads).read_batch(0),
                     lambda: BatchReader(reopened, "train", 100, threads=threads).check_all(),
                     lambda: check_mappings(reopened, ["train"], threads=threads)):
            with pytest.raises(DataError) as caught:
                read()
            assert (caught.value.file, caught.value.feature, caught.value.row) == expected[:3]
            assert expected[3] in str(caught.value)


@pytest.mark.parametrize("numerical, one_hot, multi_hot, group", [
    ([], {}, {"a": (5, 2), "b": (300, 1)}, None),  # no numerical, no one-hot
    (["x"], {"c": 9}, {}, "g"),  # one-hot only, named onehot_categorical (a group id is present)
    (["x", "y"], {}, {}, None),  # no categorical feature at all
    ([], {"c": 9}, {"a": (40000, 4)}, "g"),
])
def test_spec_variants_read_back(tmp_path, numerical, one_hot, multi_hot, group, decode_kernels):
    spec = FeatureSpec.split_binary("label", numerical, one_hot, mappings=["train"], multi_hot=multi_hot, group=group)
    rng = np.random.default_rng(3)
    n = 37
    tables = [rng.integers(0, card, n) for card in one_hot.values()]
    tables += [np.where(rng.random((n, h)) < 0.5, rng.integers(0, card, (n, h)), -1) for card, h in multi_hot.values()]
    tables = [np.sort(t, axis=1)[:, ::-1] if t.ndim == 2 else t for t in tables]  # -1 last
    label, values = rng.random(n) < 0.5, rng.normal(size=(n, len(numerical)))
    groups = rng.integers(0, 1000, n) if group else None
    write_split_binary(str(tmp_path), spec, "train", label, values, tables, groups)
    spec.save(str(tmp_path))
    batch = BatchReader(FeatureSpec.load(str(tmp_path)), "train", n, prefetch=0).read_batch(0)
    expected = np.concatenate([t.reshape(n, -1) for t in tables], axis=1) if tables else np.empty((n, 0))
    np.testing.assert_array_equal(batch.categorical, expected)
    assert batch.numerical.shape == (n, len(numerical))
    assert (batch.group is None) == (group is None)
