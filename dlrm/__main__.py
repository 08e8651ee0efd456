"""`python -m dlrm`: train or evaluate, as `python main.py` (`dlrm.cli`)."""
from dlrm.cli import main

raise SystemExit(main())
