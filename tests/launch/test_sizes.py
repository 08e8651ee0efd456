"""The one size grammar of every command line (`dlrm.sizes`): units, case, spaces, refusals."""
import pytest

from dlrm.argtypes import ArgumentParser
from dlrm.errors import UsageError
from dlrm.sizes import SizeError, byte_size, format_bytes, parse_bytes, positive_byte_size

KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("0", 0), ("1e9", 10**9), ("12B", 12), ("12b", 12),
    ("64k", 64 * KiB), ("64KiB", 64 * KiB), ("64KB", 64 * KiB), ("64kb", 64 * KiB),
    ("128m", 128 * MiB), ("128MiB", 128 * MiB), ("128MB", 128 * MiB), ("128mib", 128 * MiB),
    ("1g", GiB), ("1G", GiB), ("1GiB", GiB), ("1GB", GiB), ("1gb", GiB), ("1gib", GiB),
    ("2t", 2 * TiB), ("2TiB", 2 * TiB), ("2TB", 2 * TiB),
    ("1.5GiB", 3 * GiB // 2), (".5m", MiB // 2), ("80 GiB", 80 * GiB), ("  80g  ", 80 * GiB), ("1.0000001", 1),
])
def test_every_unit_is_a_power_of_1024_in_any_case(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "GiB", "1x", "1ib", "1 g b", "-1m", "1,5g", "1 000", "1PiB", "0x10"])
def test_bad_sizes_are_refused_with_the_grammar(text):
    with pytest.raises(SizeError, match=f"invalid size {text!r}: expected bytes or a number with a unit"):
        parse_bytes(text)


def test_a_size_flag_refuses_bad_input_in_one_message_naming_the_flag():
    parser = ArgumentParser(prog="tool")
    parser.add_argument("--rank_memory", type=positive_byte_size)
    parser.add_argument("--replicate_threshold", type=byte_size)
    assert parser.parse_args(["--rank_memory", "80g", "--replicate_threshold", "0"]).rank_memory == 80 * GiB
    for argv, message in ((["--rank_memory", "80 gigs"], "argument --rank_memory: invalid size '80 gigs': expected"),
                          (["--rank_memory", "0GiB"], "argument --rank_memory: expected a memory size above 0"),
                          (["--replicate_threshold", "1e999"], "argument --replicate_threshold: invalid size '1e999': "
                                                               "not a finite number")):
        with pytest.raises(UsageError) as caught:
            parser.parse_args(argv)
        assert message in str(caught.value) and str(caught.value).count("error:") == 1


def test_printed_sizes_read_back():
    for n in (3 * GiB // 2, 80 * GiB, 5 * MiB, 2 * TiB):
        assert parse_bytes(format_bytes(n)) == n
    assert format_bytes(999) == "999 B"
