"""Benchmarks of the trainer, the data pipeline and the preprocessing.

Run each as `python -m benchmarks.<name>` from the repository root (docs/benchmarks.md). The package imports
`dlrm` first, so that TensorFlow loads with the trainer's environment switches (dlrm/__init__.py) in the
trainer's candidates and the baselines alike.
"""
import dlrm  # noqa: F401
