"""`python -m dlrm.embedding.planner`: the planner's CLI (`dlrm.embedding.planner.cli`)."""
import sys

from dlrm.embedding.planner.cli import main

sys.exit(main())
