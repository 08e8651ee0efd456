"""Input splits, lines, chunk ids and the shuffle encoding. Every line is read exactly once, whatever the
split size, as Spark's text reader cuts lines (\\n, \\r\\n and a lone \\r end a line; empty lines count;
a last line may lack a terminator)."""
from __future__ import annotations

import gzip

import numpy as np
import pyarrow as pa
import pytest

from preproc_spark3.chunks import ChunkLayout, chunk_ids
from preproc_spark3.config import PreprocConfig, PreprocessError, SparkSettings, partition_bytes
from preproc_spark3.raw_input import count_lines, find_day_files, line_blocks, lines_array, plan_splits

TEXTS = [b"a\tb\nccc\r\n\r\ndd\re\n\nlast", b"x\r", b"\n", b"one\ntwo\n", b"\r\n\r\r\n\n\r"]


def _expected(text: bytes) -> list[str]:
    lines = text.decode().replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[:-1] if text.endswith((b"\n", b"\r")) else lines


@pytest.mark.parametrize("text", TEXTS)
def test_every_line_once_for_every_split_size_and_block_size(tmp_path, text):
    path = tmp_path / "day_0"
    path.write_bytes(text)
    for max_bytes in range(1, len(text) + 1):
        for block_bytes in (1, 2, 3, 1 << 20):
            lines, counted = [], 0
            for split in plan_splits({0: path}, max_bytes):
                for block in line_blocks(split, block_bytes):
                    lines += lines_array(block).to_pylist()
                    counted += count_lines(block)
            assert lines == _expected(text), (max_bytes, block_bytes)
            assert counted == len(lines)


def test_a_gzip_file_is_one_split_read_as_a_stream(tmp_path):
    text = b"".join(b"%d\t%s\r\n" % (i, b"x" * (i % 7)) for i in range(2000))
    (tmp_path / "day_4.gz").write_bytes(gzip.compress(text))
    splits = plan_splits(find_day_files(str(tmp_path), (4,)), max_bytes=100)
    assert len(splits) == 1 and splits[0].codec == "gz"
    lines = [line for block in line_blocks(splits[0], block_bytes=1000) for line in lines_array(block).to_pylist()]
    assert lines == _expected(text)


def test_sizes_and_unknown_codecs():
    for text, expected in (("128m", 128 << 20), ("1g", 1 << 30), ("4096", 4096), ("80GiB", 80 << 30)):
        assert partition_bytes(SparkSettings(max_partition_bytes=text)) == expected
    for bad in ("0", "-1m", "1x", ""):
        with pytest.raises(PreprocessError, match="^--max_partition_bytes: "):
            partition_bytes(SparkSettings(max_partition_bytes=bad))
    settings = SparkSettings(max_partition_bytes="abc")
    with pytest.raises(PreprocessError, match="--max_partition_bytes: invalid size 'abc': expected bytes or"):
        PreprocConfig(raw_dir="raw", out_dir="out", spark=settings).validate()


def test_chunk_ids_cut_each_split_into_ordered_ranges():
    config = PreprocConfig(raw_dir="", out_dir="", train_days=(0, 1), eval_day=2, shuffle=False)
    layout = ChunkLayout((2, 2, 1), ((0, 3), (1, 3)), 2, 3)
    day = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    line = np.array([1, 2, 3, 1, 2, 3, 1, 2, 3])
    np.testing.assert_array_equal(chunk_ids(layout, config, day, line, np.zeros(9, np.int64)),
                                  [0, 0, 0, 1, 1, 1, 2, 3, 4])
    config.shuffle = True  # shuffled train: the top bit of the signed key (2 chunks)
    keys = np.array([-(2**63), -1, 0, 2**63 - 1, 5, -5, 0, 0, 0])
    np.testing.assert_array_equal(chunk_ids(layout, config, day, line, keys), [0, 0, 1, 1, 1, 0, 2, 3, 4])


def test_categorical_packing_round_trips():
    from preproc_spark3.parse_job import pack_categorical, unpack_categorical

    values = np.array([[0, -1, 2**32 - 1] + [5] * 23, [-1] * 26], dtype=np.int64)
    np.testing.assert_array_equal(unpack_categorical(*pack_categorical(values)), values)


def test_vectorised_check_agrees_with_the_field_checks():
    """parse_lines keeps exactly the lines line_problem finds no problem with (fields at every position)."""
    from preproc_spark3.validate import line_problem, parse_lines

    good = ["1", *["-12", "", "0", "123456789012345678"] * 3, "7", *["", "0", "aBcD", "ffffffff"] * 6, "12", "a"]
    variants = [good]
    bad_fields = ["", "2", "01", "-", "--1", "1-", "1234567890123456789", "+1", " 1", "1.5", "x", "123456789",
                  "g", "-1a", "ééé", "0x1"]
    for position in (0, 1, 13, 14, 39):
        for field in bad_fields:
            variants.append(good[:position] + [field] + good[position + 1:])
    variants += [good[:-1], good + [""], ["\\t".join(good)], [""]]
    lines = pa.array(["\t".join(v) for v in variants])
    parsed = parse_lines(lines)
    assert parsed.good.tolist() == [line_problem(text) is None for text in lines.to_pylist()]
    assert parsed.good[0] and len(parsed.bad_rows) > 40
    np.testing.assert_array_equal(parsed.integers[0], [-12, 0, 0, 123456789012345678] * 3 + [7])
    assert parsed.categorical[0].tolist() == [-1, 0, 0xABCD, 0xFFFFFFFF] * 6 + [0x12, 0xA]
