#!/usr/bin/env bash
# Spark GPU discovery script (spark.{driver,executor}.resource.gpu.discoveryScript): prints the GPUs
# this host has as {"name": "gpu", "addresses": ["0", "1", ...]}. Same output as Spark's example script.
set -euo pipefail
addresses=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed -e 's/^/"/' -e 's/$/"/' | paste -sd, -)
echo "{\"name\": \"gpu\", \"addresses\": [${addresses}]}"
