"""Train / evaluate DLRM or DCNv2: `python main.py --help`. With no flags, the embedded demo.

Thin on purpose: flags become a `Config` in `dlrm.cli`, the work happens in `dlrm.train.modes.run`
(with `--saved_model_output_path`, followed by the export, `dlrm.export`, which the trainer does not
import), and errors are reported by `dlrm.cli_errors.run_main` (one message from one rank, no traceback
unless `--debug`). Exit status: 0 on success, 2 for a bad command line, 128 + N when stopped by
signal N, 1 for any other error (bad data, a model that does not fit, an unusable checkpoint, a NaN
loss, a failed peer rank).
"""
import sys


def train(argv) -> int:
    from dlrm.cli import parse_config

    config = parse_config(argv)
    from dlrm.export.after_training import ExportAfterTraining
    from dlrm.train.modes import run

    export_to = config.train.saved_model_output_path
    run(config, after_training=ExportAfterTraining(export_to) if export_to else None)
    return 0


def main(argv=None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(train, argv)


if __name__ == "__main__":
    sys.exit(main())
