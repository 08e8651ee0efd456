"""`python -m dlrm.export --checkpoint DIR --out DIR`: see dlrm/export/cli.py."""
from dlrm.export.cli import main

raise SystemExit(main())
