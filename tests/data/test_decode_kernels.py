"""Each decode/check kernel: the compiled one equals the numpy reference bit for bit.

Random inputs over every stored dtype the feature spec allows (labels as bytes, float16 and float32
numericals, int8/int16/int32 one-hot ids and multi-hot rows), with and without bad values, for empty
ranges, a last partial batch and sizes that are not multiples of the kernels' vector, tile and block
widths.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from dlrm.data.reader import decode
from dlrm.data.reader.decode_arrays import read_only, total_hotness
from tests.data.mixed_dataset import random_bags

ID_DTYPES = {np.int8: 128, np.int16: 32768, np.int32: 1 << 20}  # dtype -> largest cardinality it holds
# (numerical dtype or None, id dtype per one-hot table, (id dtype, max_hotness) per multi-hot table)
LAYOUTS = {
    "criteo-like": (np.float16, [np.int8, np.int16, np.int32, np.int8] * 6 + [np.int16, np.int32], []),
    "float32, 9 tables": (np.float32, [np.int32, np.int8] * 4 + [np.int16], []),
    "3 tables, no numericals": (None, [np.int16, np.int8, np.int32], []),
    "no tables": (np.float16, [], []),
    "9 one-hot and multi-hot": (np.float32, [np.int32, np.int8] * 4 + [np.int16],
                                [(np.int8, 3), (np.int16, 2), (np.int32, 1), (np.int8, 7), (np.int16, 100)]),
    "multi-hot only": (None, [], [(np.int16, 4), (np.int8, 1), (np.int32, 12)]),
}
WIDTH = 13


def random_sources(rows: int, layout: str, bad: bool, seed: int) -> decode.RowSources:
    """A mapping of `rows` random rows; with `bad`, a few bad values of every kind at random places."""
    rng = np.random.default_rng(seed)
    numerical_dtype, id_dtypes, bag_layout = LAYOUTS[layout]
    label = (rng.random(rows) < 0.3).astype(np.uint8)
    numerical = None
    if numerical_dtype is not None:
        numerical = rng.normal(0, 3, rows * WIDTH).astype(numerical_dtype)
        edges = np.array([0.0, -0.0, 6e-8, -6e-8, 1e-5, 65504.0, -65504.0], numerical_dtype)
        numerical[:min(rows * WIDTH, edges.size)] = edges[:rows * WIDTH]
    cards = [int(rng.integers(1, ID_DTYPES[dtype] + 1)) for dtype in id_dtypes]
    columns = [rng.integers(0, card, rows).astype(dtype) for dtype, card in zip(id_dtypes, cards)]
    bag_cards = [int(rng.integers(1, ID_DTYPES[dtype] + 1)) for dtype, _ in bag_layout]
    bags = [random_bags(rng, rows, card, hotness).astype(dtype)
            for (dtype, hotness), card in zip(bag_layout, bag_cards)]
    if bad and rows:
        label[rng.integers(0, rows, 2)] = rng.integers(2, 256, 2)
        if numerical is not None:
            numerical[rng.integers(0, rows * WIDTH, 3)] = [np.inf, -np.inf, np.nan]
        for col, card in zip(columns, cards):
            col[rng.integers(0, rows, 2)] = [-1, card] if card < np.iinfo(col.dtype).max else -1
        for bag, card in zip(bags, bag_cards):
            spoil_bags(rng, bag, card)
    hotness = [1] * len(columns) + [h for _, h in bag_layout]
    return decode.row_sources(label, numerical, 0 if numerical is None else WIDTH, columns + [b.ravel() for b in bags],
                              cards + bag_cards, hotness, [False] * len(columns) + [True] * len(bags))


def spoil_bags(rng, bag: np.ndarray, card: int) -> None:
    """An id out of range, an id below the padding and an id after padding, each in a random row."""
    rows, hotness = bag.shape
    limit = np.iinfo(bag.dtype).max
    bag[rng.integers(0, rows), rng.integers(0, hotness)] = card if card <= limit else -2
    bag[rng.integers(0, rows), rng.integers(0, hotness)] = -2
    if hotness > 1:
        row = rng.integers(0, rows)
        bag[row, 0], bag[row, 1] = -1, rng.integers(0, card)


def empty_outputs(rows: int, sources: decode.RowSources) -> decode.BatchArrays:
    """Outputs filled with a pattern, so a value a kernel fails to write shows up."""
    out = decode.BatchArrays(np.full(rows, 7.0, np.float32), np.full(rows * sources.width, 0xDEADBEEF, np.uint32),
                             np.full((rows, total_hotness(sources)), -7, np.int32))
    return out


def scratch(sources: decode.RowSources, parts: int = 1) -> np.ndarray:
    return decode.new_scratch(parts, sources.onehot)


# (rows in the mapping, first row, rows decoded): empty, tiny, not multiples of 8/16, several categorical
# blocks, and a last partial batch ending at the mapping's end
RANGES = [(0, 0, 0), (50, 50, 0), (50, 0, 1), (50, 3, 13), (300, 0, 300), (300, 17, 283),
          (2 * decode.CATEGORICAL_BLOCK_ROWS + 29, 5, 2 * decode.CATEGORICAL_BLOCK_ROWS + 24)]
CASES = [(layout, rows, first, n, bad) for layout in LAYOUTS for rows, first, n in RANGES for bad in (False, True)]


def case_id(case) -> str:
    layout, rows, first, n, bad = case
    return f"{layout}-rows{rows}-from{first}-n{n}-{'bad' if bad else 'good'}"


def assert_same_result_and_bits(compiled, reference, compiled_out, reference_out) -> None:
    """Same reported position; when nothing is bad, the same output bits (a batch with a bad value is
    discarded, so its outputs are not specified)."""
    assert compiled == reference
    if (compiled[0] if isinstance(compiled, tuple) else compiled) < 0:
        for got, want in zip(compiled_out, reference_out):
            np.testing.assert_array_equal(got.view(np.uint32) if got.dtype == np.float32 else got,
                                          want.view(np.uint32) if want.dtype == np.float32 else want)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_decode_label(case):
    layout, rows, first, n, bad = case
    src = random_sources(rows, layout, bad, seed=rows + n).label[first:first + n]
    outs = [np.full(n, 7.0, np.float32) for _ in range(2)]
    compiled, reference = decode.NUMBA.decode_label(src, outs[0]), decode.NUMPY.decode_label(src, outs[1])
    assert compiled == reference
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))  # every byte is written


@pytest.mark.parametrize("case", [c for c in CASES if LAYOUTS[c[0]][0] is not None], ids=case_id)
def test_decode_half_and_single(case):
    layout, rows, first, n, bad = case
    sources = random_sources(rows, layout, bad, seed=rows + n + 1)
    kernel = "decode_half" if sources.half.size else "decode_single"
    src = (sources.half if sources.half.size else sources.single)[first * WIDTH:(first + n) * WIDTH]
    outs = [np.full(src.size, 0xDEADBEEF, np.uint32) for _ in range(2)]
    compiled = getattr(decode.NUMBA, kernel)(src, outs[0])
    assert compiled == getattr(decode.NUMPY, kernel)(src, outs[1])
    not_nan = ~np.isnan(src.view(np.float16 if src.itemsize == 2 else np.float32))  # NaN: a rejected value
    np.testing.assert_array_equal(outs[0][not_nan], outs[1][not_nan])


def test_decode_half_every_bit_pattern():
    """All 65,536 float16 patterns, at every offset within a 16-value vector."""
    patterns = np.arange(65536, dtype=np.uint16)
    for shift in (0, 5, 15):
        src = patterns[shift:]
        outs = [np.empty(src.size, np.uint32) for _ in range(2)]
        assert decode.NUMBA.decode_half(src, outs[0]) == decode.NUMPY.decode_half(src, outs[1]) == 0x7C00 - shift
        not_nan = ~np.isnan(src.view(np.float16))
        np.testing.assert_array_equal(outs[0][not_nan], outs[1][not_nan])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_decode_categorical(case):
    layout, rows, first, n, bad = case
    sources = random_sources(rows, layout, bad, seed=rows + n + 2)
    outs = [empty_outputs(n, sources).categorical for _ in range(2)]
    compiled = decode.NUMBA.decode_categorical(sources, first, scratch(sources)[0], outs[0])
    reference = decode.NUMPY.decode_categorical(sources, first, None, outs[1])
    assert_same_result_and_bits(compiled, reference, [outs[0]], [outs[1]])


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_decode_rows(case, parts):
    """Whole batches, on one thread or split into row ranges on several: the earliest bad value of the
    batch whatever the split."""
    layout, rows, first, n, bad = case
    sources = random_sources(rows, layout, bad, seed=rows + n + 3)
    outs = [empty_outputs(n, sources) for _ in range(2)]
    compiled = decode.NUMBA.decode_rows(sources, first, parts, scratch(sources, parts), outs[0])
    reference = decode.NUMPY.decode_rows(sources, first, parts, None, outs[1])
    assert_same_result_and_bits(compiled, reference, outs[0], outs[1])


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_check_block(case):
    layout, rows, first, n, bad = case
    sources = random_sources(rows, layout, bad, seed=rows + n + 4)
    assert decode.NUMBA.check_block(sources, first, first + n) == decode.NUMPY.check_block(sources, first, first + n)


def test_several_bad_values_report_the_earliest_row_then_the_lowest_kind_and_column():
    sources = random_sources(100, "criteo-like", bad=False, seed=5)
    label, half = np.array(sources.label), np.array(sources.half)
    cols = [np.array(c) for c in sources.cols8]
    label[60], half[40 * WIDTH + 7], cols[2][40] = 3, np.float16(np.inf).view(np.uint16), -1
    half[30 * WIDTH + 9], cols[1][30] = np.float16(np.nan).view(np.uint16), -1  # row 30: numerical < id
    sources = sources._replace(label=read_only(label), half=read_only(half), cols8=tuple(read_only(c) for c in cols))
    for kernels in (decode.NUMBA, decode.NUMPY):
        assert kernels.decode_rows(sources, 0, 1, scratch(sources), empty_outputs(100, sources)) == \
            (decode.NUMERICAL, 9, 30)
        assert kernels.check_block(sources, 31, 100)[:3] == (decode.NUMERICAL, 7, 40)
        assert kernels.check_block(sources, 41, 100)[:3] == (decode.LABEL, 0, 60)


def test_bad_multi_hot_rows_are_reported_at_the_earliest_row_then_the_lowest_table():
    """9 one-hot tables (columns 0..8), then bags: table 9 (columns 9..11), 10 (12..13), 11 (14),
    12 (15..21), 13 (22..121)."""
    sources = random_sources(100, "9 one-hot and multi-hot", bad=False, seed=6)
    bags8, bags16 = [np.array(b) for b in sources.bags8], [np.array(b) for b in sources.bags16]
    bags8[0][50 * 3:51 * 3] = [4, -1, 2]  # table 9, row 50: an id after padding
    bags16[1][50 * 100 + 99] = -3  # table 13, row 50: an id below the padding
    bags8[1][70 * 7:71 * 7] = [-1] * 6 + [0]  # table 12, row 70
    one_hot = [np.array(c) for c in sources.cols32]
    one_hot[0][70] = -1  # table 0, row 70: a one-hot id is never padding
    sources = sources._replace(bags8=tuple(map(read_only, bags8)), bags16=tuple(map(read_only, bags16)),
                               cols32=tuple(map(read_only, one_hot)))
    for kernels in (decode.NUMBA, decode.NUMPY):
        assert kernels.decode_rows(sources, 0, 1, scratch(sources), empty_outputs(100, sources)) == \
            (decode.CATEGORICAL, 9, 50)
        assert kernels.check_block(sources, 0, 100)[:3] == (decode.CATEGORICAL, 9, 50)
        assert kernels.check_block(sources, 51, 100)[:3] == (decode.CATEGORICAL, 0, 70)
        out = empty_outputs(30, sources)
        assert kernels.decode_rows(sources, 0, 1, scratch(sources), out) == decode.NO_ERROR
        np.testing.assert_array_equal(out.categorical[:, 9:12], bags8[0][:90].reshape(30, 3))
        np.testing.assert_array_equal(out.categorical[:, 22:122], bags16[1][:3000].reshape(30, 100))
        assert (out.categorical[0, 9:] == -1).all()  # row 0 is an empty bag in every multi-hot table


def test_importing_the_data_package_changes_no_global_state():
    """Importing the reader neither reconfigures numba nor picks kernels: that happens on first use."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import numba\nbefore = numba.config.THREADING_LAYER\n"
            "import dlrm.data.reader.reader, dlrm.data.reader.validate\nfrom dlrm.data.reader import decode\n"
            "print(before, numba.config.THREADING_LAYER, decode.host_kernels.cache_info().currsize)")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    run = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    before, after, kernels_picked = run.stdout.split()
    assert after == before and kernels_picked == "0"
