"""Data layer: feature spec, split-binary writer/reader, synthetic data with a known ground truth,
CSV transcoding. No TensorFlow. Submodules are imported explicitly (e.g. `dlrm.data.binary`), so
pure-Python users such as the planner (`dlrm.data.criteo`) do not pay for numba/pandas imports.
See docs/data.md."""
