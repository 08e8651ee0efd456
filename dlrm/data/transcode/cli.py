"""The command line of the transcoder: `python -m dlrm.data.transcode --input INPUT_SPEC.yaml --output OUT_DIR
[--overwrite] [--delimiter ,] [--chunk_rows N]`."""
from __future__ import annotations

import argparse
import os
from typing import Optional, Sequence

from dlrm.argtypes import (
    ArgumentParser,
    add_debug_flag,
    command_line,
    one_character,
    positive_int,
    refuse_unless,
    typed_flag,
)
from dlrm.data.format.writer import dataset_dir
from dlrm.data.transcode import convert
from dlrm.data.transcode.convert import DEFAULT_CHUNK_ROWS, load_input_spec, transcode
from dlrm.data.transcode.parquet_input import is_parquet_spec


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m dlrm.data.transcode", description=convert.__doc__.split("\n")[0])
    parser.add_argument("--input", required=True,
                        help="feature spec (yaml) of the CSV or parquet (NVIDIA Wide & Deep layout) dataset")
    parser.add_argument("--output", required=True,
                        help="output directory of the split-binary dataset (new or empty, or see --overwrite)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the dataset already in --output (never a directory that holds no dataset)")
    parser.add_argument("--delimiter", type=one_character, default=",",
                        help="CSV field separator, one character (use $'\\t' for TSV; default: ,)")
    parser.add_argument("--chunk_rows", type=positive_int, default=DEFAULT_CHUNK_ROWS,
                        help=f"rows read at a time (default: {DEFAULT_CHUNK_ROWS})")
    add_debug_flag(parser)
    return parser


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The flags; --delimiter is refused for a parquet source (it would change nothing)."""
    parser, argv = build_parser(), command_line(argv)
    args = parser.parse_args(argv)
    if typed_flag(argv, "--delimiter"):
        refuse_unless(parser, argv, not is_parquet_spec(load_input_spec(args.input)), ("--delimiter",),
                      f"not used by the parquet source of {args.input} (it applies to CSV files)")
    return args


def transcode_from_flags(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    with dataset_dir(args.output, "--output").staged(args.overwrite) as tmp:
        spec = transcode(args.input, tmp, args.chunk_rows, args.delimiter)
    print(f"wrote {spec.metadata['num_rows']} rows to {os.path.abspath(args.output)}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(transcode_from_flags, argv)
