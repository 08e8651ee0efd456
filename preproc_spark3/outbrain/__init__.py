"""The Outbrain preprocessing job: Kaggle's raw click logs -> the Wide & Deep split-binary dataset (Spark 3).

The rules are in docs/preprocessing.md ("Outbrain (Wide & Deep): the feature rules"), the constants in
`dlrm.data.outbrain`. `python -m preproc_spark3.outbrain RAW_DIR OUT_DIR` (prepare_outbrain.sh wraps it).
"""
