"""Raw Criteo click-log days -> split-binary DLRM dataset, with Apache Spark 3.

Jobs (see docs/preprocessing.md and preproc_spark3.pipeline): count the lines of each input split;
parse + validate the raw TSV lines once in Python tasks (numpy/pyarrow; malformed ones are
quarantined) as the map side of one shuffle of compact numpy blobs; reduce: the quarantine file and
the per-feature dictionaries (frequency threshold, ids by count), then each output chunk ordered by
the shuffle key, its ids looked up and written as split binary (optionally parquet); then each split's
files are assembled from its chunks and feature_spec.yaml is written.
"""
