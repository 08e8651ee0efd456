#!/usr/bin/env bash
# Raw Criteo 1TB click logs -> split-binary DLRM dataset (Spark 3; docs/preprocessing.md).
#
#   ./prepare_dataset.sh <raw_dir> <out_dir> <frequency_threshold> [--gpu] [more flags]
#
# <raw_dir> holds day_0 .. day_23 (optionally .gz). <frequency_threshold> is T or e.g. "15,C3:3".
# CPU mode runs Spark local[*] (or --master / PREPROC_SPARK_MASTER). --gpu runs the SQL stages with the
# RAPIDS Accelerator and needs its jar: --rapids_jar PATH or RAPIDS_PLUGIN_JAR=PATH.
# Any further flag goes to `python -m preproc_spark3` (see `--help`), e.g. --no_shuffle,
# --driver_memory 200g, --local_dir /nvme/spark, --train_days 0-22 --eval_day 23.
set -euo pipefail

usage() {
    echo "usage: $0 <raw_dir> <out_dir> <frequency_threshold> [--gpu] [flags of python -m preproc_spark3]" >&2
    exit 2
}
[[ $# -ge 3 ]] || usage
raw_dir=$1 out_dir=$2 threshold=$3
shift 3

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-"$here/.venv/bin/python"}
[[ -x "$python" ]] || { echo "error: python not found at $python (set PYTHON=...)" >&2; exit 2; }

# start_session (preproc_spark3/session.py) points Spark's Python workers at this interpreter and sets
# SPARK_LOCAL_IP=127.0.0.1 for local masters, unless PYSPARK_PYTHON / SPARK_LOCAL_IP are already set.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m preproc_spark3 "$raw_dir" "$out_dir" --frequency_threshold "$threshold" "$@"
