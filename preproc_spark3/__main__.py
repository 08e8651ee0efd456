"""`python -m preproc_spark3 <raw_dir> <out_dir> [flags]` (prepare_dataset.sh wraps this)."""
import sys

from preproc_spark3.cli import main

sys.exit(main())
