"""Bring your own data: headerless CSV or NVIDIA's Wide & Deep parquet, described by a feature spec,
transcoded to a split-binary dataset. `python -m dlrm.data.transcode` runs it."""
