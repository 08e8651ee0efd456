"""`python -m dlrm.launch`: submit or collect a sweep (`dlrm.launch.cli`)."""
from dlrm.launch.cli import main

raise SystemExit(main())
