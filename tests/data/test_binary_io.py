"""Split-binary writer and reader: bit-exact round trip, file layout, streaming, atomic publish."""
import os

import numpy as np
import pytest

from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import SplitBinaryWriter, write_split_binary
from dlrm.data.reader.reader import BatchReader
from tests.support.datasets import CARDS, make_dataset, random_rows


def test_kernel_selection():
    from dlrm.data.reader import decode

    compiled, portable = decode.NUMBA, decode.NUMPY
    assert decode.select_kernels("x86_64", {"f16c": True}) == compiled
    assert decode.select_kernels("x86_64", {"f16c": False}) == portable
    assert decode.select_kernels("aarch64", {}) == portable


def read_all(reader):
    batches = list(reader)
    return (np.concatenate([b.label for b in batches]), np.concatenate([b.numerical for b in batches]),
            np.concatenate([b.categorical for b in batches]))


def test_round_trip_is_bit_exact(tmp_path, decode_kernels):
    spec, data = make_dataset(tmp_path, 1000)
    label, numerical, categorical = data["train"]
    reader = BatchReader(spec, "train", global_batch_size=300)
    got_label, got_numerical, got_categorical = read_all(reader)
    assert got_label.dtype == np.float32 and got_numerical.dtype == np.float32
    assert got_categorical.dtype == np.int32 and got_categorical.flags.c_contiguous
    assert got_numerical.shape == (1000, 13) and got_categorical.shape == (1000, 26)
    np.testing.assert_array_equal(got_label, label.astype(np.float32))
    # float16 -> float32 is exact: compare bit patterns (covers -0.0 and subnormals).
    np.testing.assert_array_equal(got_numerical.view(np.uint32), numerical.astype(np.float32).view(np.uint32))
    np.testing.assert_array_equal(got_categorical, categorical)


def test_every_float16_value_decodes_exactly(tmp_path, decode_kernels):
    halves = np.arange(65536, dtype=np.uint16).view(np.float16)
    finite = halves[np.isfinite(halves)]
    n = finite.size // 13
    numerical = finite[: n * 13].reshape(n, 13)
    spec = FeatureSpec.criteo_like([2], 13, mappings=["train"])
    write_split_binary(str(tmp_path), spec, "train", np.zeros(n, bool), numerical, np.zeros((n, 1), np.int64))
    spec.save(str(tmp_path))
    batch = BatchReader(FeatureSpec.load(str(tmp_path)), "train", n, prefetch=0).read_batch(0)
    np.testing.assert_array_equal(batch.numerical.view(np.uint32), numerical.astype(np.float32).view(np.uint32))


def test_float32_numerical_files_decode_exactly_and_are_checked(tmp_path, decode_kernels):
    """float32 numerical files (allowed by the feature spec) decode bit-exactly; NaN/inf are named."""
    cards = CARDS[:9]
    spec = FeatureSpec.criteo_like(cards, 5, mappings=["train"])
    for name in spec.channel_spec["numerical"]:
        spec.feature_spec[name]["dtype"] = "float32"
    label, _, categorical = random_rows(70, cards, num_numerical=5)
    numerical = np.random.default_rng(1).normal(0.0, 1e3, size=(70, 5)).astype(np.float32)
    numerical[0] = [0.0, -0.0, 1e-45, -3e38, 3.4e38]  # zeros, a subnormal, near the limits
    write_split_binary(str(tmp_path), spec, "train", label, numerical, categorical)
    spec.metadata["num_rows"] = {"train": 70}
    spec.save(str(tmp_path))
    batch = BatchReader(FeatureSpec.load(str(tmp_path)), "train", 70, prefetch=0).read_batch(0)
    np.testing.assert_array_equal(batch.numerical.view(np.uint32), numerical.view(np.uint32))
    np.testing.assert_array_equal(batch.categorical, categorical)
    path = tmp_path / "train" / "numerical.bin"
    stored = np.fromfile(path, dtype=np.float32)
    stored[33 * 5 + 1] = np.nan
    stored.tofile(path)
    with pytest.raises(DataError) as caught:
        BatchReader(FeatureSpec.load(str(tmp_path)), "train", 70, prefetch=0).read_batch(0)
    assert (caught.value.file, caught.value.feature, caught.value.row) == (str(path), "num_1", 33)
    assert "numerical value nan is NaN or inf" in str(caught.value)


def test_file_layout_and_sizes(tmp_path):
    spec, _ = make_dataset(tmp_path, 77)
    train = tmp_path / "train"
    assert os.path.getsize(train / "label.bin") == 77
    assert os.path.getsize(train / "numerical.bin") == 77 * 13 * 2
    for i, card in enumerate(CARDS):
        width = 1 if card <= 128 else 2 if card <= 32768 else 4
        assert os.path.getsize(train / f"cat_{i}.bin") == 77 * width, (i, card)
        assert spec.dtype(f"cat_{i}").itemsize == width
    # row-major float16: row r, column c at (r*13 + c)*2
    label, numerical, categorical = random_rows(77)
    raw = np.fromfile(train / "numerical.bin", dtype=np.float16).reshape(77, 13)
    np.testing.assert_array_equal(raw.view(np.uint16), numerical.view(np.uint16))
    np.testing.assert_array_equal(np.fromfile(train / "cat_3.bin", dtype=np.int32), categorical[:, 3])
    np.testing.assert_array_equal(np.fromfile(train / "label.bin", dtype=np.bool_), label)


def test_streaming_chunks_equal_one_write(tmp_path):
    label, numerical, categorical = random_rows(500, seed=3)
    spec = FeatureSpec.criteo_like(CARDS, mappings=["train"])
    write_split_binary(str(tmp_path / "one"), spec, "train", label, numerical, categorical)
    with SplitBinaryWriter(str(tmp_path / "many"), spec, "train") as writer:
        for start in range(0, 500, 64):
            rows = slice(start, start + 64)
            columns = [categorical[rows, j].astype(np.int32) for j in range(len(CARDS))]  # column form
            writer.write(label[rows].astype(np.int8), numerical[rows].astype(np.float64), columns)
    assert writer.rows_written == 500
    for name in os.listdir(tmp_path / "one" / "train"):
        assert (tmp_path / "one" / "train" / name).read_bytes() == (tmp_path / "many" / "train" / name).read_bytes()


def test_writer_publishes_only_on_close(tmp_path):
    spec = FeatureSpec.criteo_like(CARDS, mappings=["train"])
    label, numerical, categorical = random_rows(10)
    writer = SplitBinaryWriter(str(tmp_path), spec, "train")
    writer.write(label, numerical, categorical)
    assert not (tmp_path / "train" / "label.bin").exists()
    assert (tmp_path / "train" / "label.bin.partial").exists()
    assert writer.close() == 10
    assert (tmp_path / "train" / "label.bin").exists()
    assert not list((tmp_path / "train").glob("*.partial"))
    with pytest.raises(RuntimeError, match="closed"):
        writer.write(label, numerical, categorical)


def test_writer_aborts_on_exception(tmp_path):
    spec = FeatureSpec.criteo_like(CARDS, mappings=["train"])
    label, numerical, categorical = random_rows(10)
    with pytest.raises(KeyboardInterrupt):
        with SplitBinaryWriter(str(tmp_path), spec, "train") as writer:
            writer.write(label, numerical, categorical)
            raise KeyboardInterrupt
    assert list((tmp_path / "train").iterdir()) == []


def test_empty_mapping_reads_as_zero_batches(tmp_path):
    spec, _ = make_dataset(tmp_path, [0, 5], mappings=("train", "test"))
    reader = BatchReader(spec, "train", 4)
    assert len(reader) == 0 and list(reader) == [] and reader.rows_skipped == 0
    assert len(BatchReader(spec, "test", 4)) == 2


@pytest.mark.parametrize("tables", [26, 9, 3])
def test_blocked_tiled_decode_is_exact(tmp_path, tables, decode_kernels):
    """The categorical kernel works in row blocks and 8x8 tiles: cover several blocks, a row count
    that is not a multiple of 8, leftover tables beyond a multiple of 8, and fewer than 8 tables."""
    from dlrm.data.reader import decode

    n = 2 * decode.CATEGORICAL_BLOCK_ROWS + 13
    spec, data = make_dataset(tmp_path, n, cards=CARDS[:tables])
    batch = BatchReader(spec, "train", n, prefetch=0).read_batch(0)
    np.testing.assert_array_equal(batch.categorical, data["train"][2])
    np.testing.assert_array_equal(batch.numerical.view(np.uint32), data["train"][1].astype(np.float32).view(np.uint32))


def test_numpy_kernels_report_the_same_first_bad_position():
    """With several bad ids (and inf/NaN), both kernel sets name the same (table, row) / index first."""
    from dlrm.data.reader import decode

    n, cards = 2 * decode.CATEGORICAL_BLOCK_ROWS + 5, np.array([10, 10, 300, 70000])
    columns = [np.zeros(n, np.int8), np.zeros(n, np.int8), np.zeros(n, np.int16), np.zeros(n, np.int32)]
    columns[3][decode.CATEGORICAL_BLOCK_ROWS + 7] = -1  # second block: the earliest bad row
    columns[1][decode.CATEGORICAL_BLOCK_ROWS + 9] = 10  # same block, later row, lower table
    columns[2][decode.CATEGORICAL_BLOCK_ROWS + 7] = 300  # same row, a lower table: reported
    columns[0][2 * decode.CATEGORICAL_BLOCK_ROWS] = 10  # last block
    sources = decode.row_sources(np.zeros(n, np.uint8), None, 0, columns, cards)
    results = []
    for kernel in (decode.NUMBA.decode_categorical, decode.NUMPY.decode_categorical):
        wide = np.empty((4, decode.CATEGORICAL_BLOCK_ROWS + decode.SCRATCH_PAD), np.int32)
        results.append(kernel(sources, 0, wide, np.empty((n, 4), np.int32)))
        # from file row 5 on: the bad rows are 5 rows earlier in the output
        results.append(kernel(sources, 5, wide, np.empty((n - 5, 4), np.int32)))
    assert results[0] == results[2] == (2, decode.CATEGORICAL_BLOCK_ROWS + 7)
    assert results[1] == results[3] == (2, decode.CATEGORICAL_BLOCK_ROWS + 2)
    halves = np.ones(40, np.float16)
    halves[[21, 33]] = [np.inf, np.nan]
    singles = np.ones(40, np.float32)
    singles[[17, 30]] = [np.nan, -np.inf]
    for source, first_bad, kind in ((halves.view(np.uint16), 21, "decode_half"),
                                    (singles.view(np.uint32), 17, "decode_single")):
        for kernels in (decode.NUMBA, decode.NUMPY):
            out = np.empty(40, np.uint32)
            assert getattr(kernels, kind)(source, out) == first_bad
            np.testing.assert_array_equal(out.view(np.float32), source.view(f"f{source.itemsize}").astype(np.float32))
