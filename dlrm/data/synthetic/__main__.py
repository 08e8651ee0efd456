"""`python -m dlrm.data.synthetic`: the synthetic data generator (`dlrm.data.synthetic.cli`)."""
from dlrm.data.synthetic.cli import main

raise SystemExit(main())
