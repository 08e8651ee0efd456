"""Programs run on each rank of a multi-rank test: `python -m tests.workers.<name> ...`."""
