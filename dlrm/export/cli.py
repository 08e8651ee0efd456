"""`python -m dlrm.export`: flags -> ExportConfig -> export (errors: one line, `dlrm.cli_errors`)."""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

from dlrm.argtypes import ArgumentParser, add_debug_flag
from dlrm.config import ExportConfig
from dlrm.sizes import SIZE_UNITS, positive_byte_size


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m dlrm.export",
                            description="Export a checkpoint (written by any number of ranks) as a TensorFlow "
                                        "SavedModel for serving (docs/export.md).")
    parser.add_argument("--checkpoint", required=True,
                        help="a checkpoint root (its latest complete checkpoint) or a step_* directory")
    parser.add_argument("--out", required=True, help="the SavedModel directory to write")
    parser.add_argument("--dataset_path", dest="dataset_dir", default=None,
                        help="directory of the training dataset's feature_spec.yaml (default: the one the "
                             "checkpoint's run used; no data file is read)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    parser.add_argument("--max_memory", dest="max_memory_bytes", type=positive_byte_size, default=None,
                        help="refuse a model whose tables need more than this in one process, e.g. 64GiB "
                             f"(default: the memory this machine has available); {SIZE_UNITS}")
    parser.add_argument("--onnx", action="store_true", help="also write model.onnx into --out (tf2onnx)")
    add_debug_flag(parser)
    return parser


def parse_config(argv: Optional[Sequence[str]] = None) -> ExportConfig:
    return ExportConfig(**vars(build_parser().parse_args(list(argv) if argv is not None else None)))


def export_checkpoint(argv: Sequence[str]) -> int:
    from dlrm.export.saved_model import export

    export(parse_config(argv))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Export; errors are reported by `dlrm.cli_errors.run_main` (one message, no traceback unless --debug)."""
    from dlrm.cli_errors import run_main

    return run_main(export_checkpoint, argv)
