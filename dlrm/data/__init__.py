"""Data layer, no TensorFlow: `format` (what a dataset is: feature spec, contract, writer), `reader`
(batches for the trainer, and the start-up value check), `synthetic` (generated data with a known
ground truth) and `transcode` (CSV / parquet to split-binary). Modules are imported explicitly (e.g.
`dlrm.data.reader.reader`), so pure-Python users such as the planner (`dlrm.data.synthetic.criteo`) do
not pay for numba/pandas imports. See docs/data.md."""
