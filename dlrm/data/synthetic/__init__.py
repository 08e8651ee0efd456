"""Synthetic click data with a known ground truth: Criteo-shaped (DLRM, DCNv2) and Outbrain-shaped
(Wide & Deep) generators, the public table sizes and presets they follow, and a logistic-regression
baseline to sanity-check a dataset. `python -m dlrm.data.synthetic` runs the generator."""
