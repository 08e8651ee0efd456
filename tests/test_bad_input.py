"""Every bad-input case stops with an error naming the file, the feature and (where it applies) the row."""
import os

import numpy as np
import pytest

from dlrm.data.binary import BatchReader, SplitBinaryWriter
from dlrm.data.errors import DataError, SpecError
from dlrm.data.feature_spec import FeatureSpec
from test_binary_io import CARDS, decode_kernels, make_dataset, random_rows  # noqa: F401 (fixture)


@pytest.fixture
def dataset(tmp_path):
    spec, data = make_dataset(tmp_path, 120)
    return tmp_path, spec, data


def reopen(root, drop_row_count=False):
    spec = FeatureSpec.load(str(root))
    if drop_row_count:
        spec.metadata.pop("num_rows")
    return spec


def open_reader_error(spec):
    with pytest.raises(SpecError) as caught:
        BatchReader(spec, "train", 32)
    return str(caught.value)


# ----------------------------------------------------------------------------- files on open
def test_truncated_file(dataset):
    root, _, _ = dataset
    path = root / "train" / "cat_5.bin"  # int16: 2 bytes per row
    os.truncate(path, 119 * 2)
    message = open_reader_error(reopen(root))
    assert str(path) in message and "feature cat_5" in message and "119 rows" in message and "truncated" in message


def test_wrong_sized_file_not_whole_records(dataset):
    root, _, _ = dataset
    path = root / "train" / "numerical.bin"
    with open(path, "ab") as f:
        f.write(b"\x00")
    message = open_reader_error(reopen(root))
    assert str(path) in message and "num_0..num_12" in message and "not a whole number" in message


def test_mismatched_row_counts_without_metadata(dataset):
    root, _, _ = dataset
    path = root / "train" / "cat_3.bin"  # int32
    with open(path, "ab") as f:
        f.write(np.zeros(4, np.int32).tobytes())
    message = open_reader_error(reopen(root, drop_row_count=True))
    assert str(path) in message and "feature cat_3" in message and "124 rows" in message and "120" in message


def test_every_bad_file_is_listed(dataset):
    root, _, _ = dataset
    os.truncate(root / "train" / "cat_1.bin", 100)
    os.remove(root / "train" / "cat_7.bin")
    message = open_reader_error(reopen(root))
    assert "cat_1.bin" in message and "cat_7.bin" in message and "2 problem(s)" in message


def test_spec_naming_a_missing_file(dataset):
    root, _, _ = dataset
    os.remove(root / "train" / "label.bin")
    message = open_reader_error(reopen(root))
    assert str(root / "train" / "label.bin") in message and "feature label" in message and "does not exist" in message


def test_spec_naming_a_missing_feature(dataset):
    root, spec, _ = dataset
    spec.channel_spec["categorical"].append("cat_99")
    spec.source_spec["train"][2]["features"] = ["cat_77"]
    with pytest.raises(SpecError) as caught:
        spec.validate()
    message = str(caught.value)
    assert "'cat_99', which is missing from feature_spec" in message
    assert "'cat_77', which is missing from feature_spec" in message
    assert "no file for feature 'cat_0'" in message


# ----------------------------------------------------------------------------- values while reading
def poke(path, dtype, row, value):
    data = np.fromfile(path, dtype=dtype)
    data[row] = value
    data.tofile(path)


@pytest.mark.parametrize("table,value", [(3, 40000), (1, -1), (9, 32769), (0, 3)])
def test_id_out_of_range(dataset, table, value, decode_kernels):
    root, _, _ = dataset
    spec = reopen(root)
    path = root / "train" / f"cat_{table}.bin"
    poke(path, spec.dtype(f"cat_{table}"), 100, value)
    # found by the rank whose slice holds row 100 (rank 1: rows 92..119 of batch 1), in a prefetch thread
    reader = BatchReader(spec, "train", 64, rank=1, world_size=2)
    with pytest.raises(DataError) as caught:
        list(reader)
    error = caught.value
    assert (error.file, error.feature, error.row) == (str(path), f"cat_{table}", 100)
    assert f"id {value} is outside [0, {CARDS[table]})" in str(error)
    with pytest.raises(DataError, match="row 100"):
        BatchReader(spec, "train", 64).check_all()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_numerical(dataset, value, decode_kernels):
    root, _, _ = dataset
    path = root / "train" / "numerical.bin"
    poke(path, np.float16, 50 * 13 + 4, value)
    with pytest.raises(DataError) as caught:
        BatchReader(reopen(root), "train", 32, prefetch=0).check_all()
    assert (caught.value.file, caught.value.feature, caught.value.row) == (str(path), "num_4", 50)
    assert "NaN or inf" in str(caught.value)


def test_label_byte_not_bool(dataset):
    root, _, _ = dataset
    poke(root / "train" / "label.bin", np.uint8, 9, 7)
    with pytest.raises(DataError) as caught:
        BatchReader(reopen(root), "train", 32).read_batch(0)
    assert (caught.value.feature, caught.value.row) == ("label", 9)


@pytest.mark.parametrize("threads", [1, 3])
def test_several_bad_values_name_the_earliest_row(dataset, threads, decode_kernels, monkeypatch):
    """Bad values of every kind in one batch: the error names the earliest bad row whatever the number
    of decode threads (3 threads: rows 0..39, 40..79, 80..119); in one row, the label comes first,
    then the numericals, then the ids."""
    from dlrm.data import binary

    monkeypatch.setattr(binary, "MIN_ROWS_PER_THREAD", 8)
    root, _, _ = dataset
    train = root / "train"
    poke(train / "label.bin", np.uint8, 90, 2)
    poke(train / "numerical.bin", np.float16, 60 * 13 + 2, np.inf)
    poke(train / "cat_3.bin", np.int32, 41, -5)
    expected = [(train / "cat_3.bin", "cat_3", 41), (train / "numerical.bin", "num_7", 41),
                (train / "label.bin", "label", 41)]
    for step, (path, feature, row) in enumerate(expected):
        if step == 1:
            poke(train / "numerical.bin", np.float16, 41 * 13 + 7, np.nan)  # same row as the bad id
        if step == 2:
            poke(train / "label.bin", np.uint8, 41, 3)  # same row again
        with pytest.raises(DataError) as caught:
            BatchReader(reopen(root), "train", 120, prefetch=0, threads=threads).read_batch(0)
        assert (caught.value.file, caught.value.feature, caught.value.row) == (str(path), feature, row)


# ----------------------------------------------------------------------------- values while writing
@pytest.fixture
def writer(tmp_path):
    writer = SplitBinaryWriter(str(tmp_path), FeatureSpec.criteo_like(CARDS, mappings=["train"]), "train")
    writer.write(*random_rows(20))  # errors count rows across chunks
    yield writer
    writer.abort()


def test_writer_rejects_out_of_range_id(writer):
    label, numerical, categorical = random_rows(10)
    categorical[6, 11] = 60
    with pytest.raises(DataError) as caught:
        writer.write(label, numerical, categorical)
    assert (caught.value.feature, caught.value.row) == ("cat_11", 26)
    assert caught.value.file.endswith(os.path.join("train", "cat_11.bin")) and "outside [0, 60)" in str(caught.value)


@pytest.mark.parametrize("value,why", [(np.nan, "NaN or inf"), (np.inf, "NaN or inf"), (1e6, "overflows float16")])
def test_writer_rejects_bad_numerical(writer, value, why):
    label, numerical, categorical = random_rows(10)
    numerical = numerical.astype(np.float64)
    numerical[3, 12] = value
    with pytest.raises(DataError, match=why) as caught:
        writer.write(label, numerical, categorical)
    assert (caught.value.feature, caught.value.row) == ("num_12", 23)


def test_writer_rejects_bad_label_and_shapes(writer):
    label, numerical, categorical = random_rows(10)
    with pytest.raises(DataError, match="label 2 is not 0 or 1") as caught:
        writer.write(np.where(np.arange(10) == 4, 2, 0), numerical, categorical)
    assert caught.value.row == 24
    with pytest.raises(DataError, match="shape"):
        writer.write(label, numerical[:, :12], categorical)
    with pytest.raises(DataError, match="labels must be numbers, got dtype <U1"):
        writer.write(np.array(["1"] * 10), numerical, categorical)
    with pytest.raises(DataError, match="integers"):
        writer.write(label, numerical, categorical.astype(np.float64))
    assert writer.rows_written == 20  # nothing of a rejected chunk was written
