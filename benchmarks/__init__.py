"""Benchmarks of the trainer, the data pipeline and the preprocessing.

Run each as `python -m benchmarks.<name>` from the repository root (docs/benchmarks.md).
"""
