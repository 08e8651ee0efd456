"""`python -m dlrm.export --checkpoint DIR --out DIR`: see dlrm/export/cli.py."""
import sys

from dlrm.cli_errors import run_main
from dlrm.export.cli import main

if __name__ == "__main__":
    sys.exit(run_main(main, sys.argv[1:]))
