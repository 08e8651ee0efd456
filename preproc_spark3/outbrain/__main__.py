"""`python -m preproc_spark3.outbrain <raw_dir> <out_dir> [flags]` (prepare_outbrain.sh wraps this)."""
from preproc_spark3.outbrain.cli import main

raise SystemExit(main())
