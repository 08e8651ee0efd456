"""Raw Criteo click-log days -> split-binary DLRM dataset, with Apache Spark 3.

Stages (see docs/preprocessing.md): parse + validate raw TSV lines once (Arrow batches in the Python
workers; malformed ones are quarantined), count categorical values over the training days, apply the
frequency threshold, map values to ids and numericals to log(x+1), cut each split into ordered chunks
that the tasks write in parallel as split binary (optionally parquet), then assemble each split's
files from its chunks and write feature_spec.yaml.
"""
