"""Train / evaluate DLRM, DCNv2 or Wide & Deep: `python main.py --help`. With no flags, the embedded demo.

Thin on purpose, and the same as `python -m dlrm` and the `dlrm-train` script: flags become a `Config`
in `dlrm.cli`, the work happens in `dlrm.train.run.run`, and errors are reported by
`dlrm.cli_errors.run_main` (one message from one rank, no traceback unless `--debug`). Exit status: 0
on success, 2 for a bad command line, 128 + N when stopped by signal N, 1 for any other error (bad
data, a model that does not fit, an unusable checkpoint, a NaN loss, a failed peer rank).
"""
from dlrm.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
