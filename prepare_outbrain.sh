#!/usr/bin/env bash
# Kaggle's raw Outbrain click logs -> split-binary Wide & Deep dataset (Spark 3; docs/preprocessing.md).
#
#   ./prepare_outbrain.sh <raw_dir> <out_dir> [flags]
#
# <raw_dir> holds clicks_train, events, promoted_content, documents_meta, documents_topics, documents_entities
# and documents_categories (.csv or .csv.gz). Any flag goes to `python -m preproc_spark3.outbrain` (see
# `--help`), e.g. --seed 1, --ctr_threshold ad_id=2, --parquet, --driver_memory 200g, --master local[64].
set -euo pipefail

usage() {
    echo "usage: $0 <raw_dir> <out_dir> [flags of python -m preproc_spark3.outbrain]" >&2
    exit 2
}
[[ $# -ge 2 ]] || usage
raw_dir=$1 out_dir=$2
shift 2

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-"$here/.venv/bin/python"}
[[ -x "$python" ]] || { echo "error: python not found at $python (set PYTHON=...)" >&2; exit 2; }

# start_session (preproc_spark3/session.py) points Spark's Python workers at this interpreter and sets
# SPARK_LOCAL_IP=127.0.0.1 for local masters, unless PYSPARK_PYTHON / SPARK_LOCAL_IP are already set.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m preproc_spark3.outbrain "$raw_dir" "$out_dir" "$@"
