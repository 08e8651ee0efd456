"""Raw Criteo click-log days -> split-binary DLRM dataset, with Apache Spark 3.

Stages (see docs/preprocessing.md): parse + validate raw TSV lines (malformed ones are quarantined),
count categorical values over the training days, apply the frequency threshold, map values to ids
and numericals to log(x+1), write parquet, then stream the parquet into the data layer's
split-binary format with its feature_spec.yaml.
"""
