"""`python -m dlrm.data.transcode`: CSV / parquet to split-binary (`dlrm.data.transcode.cli`)."""
from dlrm.data.transcode.cli import main

raise SystemExit(main())
