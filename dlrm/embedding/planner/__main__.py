"""`python -m dlrm.embedding.planner`: the planner's CLI (`dlrm.embedding.planner.cli`)."""
from dlrm.embedding.planner.cli import main

raise SystemExit(main())
