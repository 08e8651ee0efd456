"""`python -m preproc_spark3 <raw_dir> <out_dir> [flags]` (prepare_dataset.sh wraps this)."""
from preproc_spark3.cli import main

raise SystemExit(main())
