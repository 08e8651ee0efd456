"""Flags (and environment defaults) -> PreprocConfig, in one place. `python -m preproc_spark3 --help`."""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import re
import sys
from typing import Any, Callable, Optional, Sequence

from dlrm import argtypes
from dlrm.data.format.errors import DataError
from dlrm.output_dir import OutputDirError
from dlrm.sizes import SIZE_UNITS
from preproc_spark3.config import (
    RAPIDS_JAR_ENV,
    PreprocConfig,
    PreprocessError,
    SparkSettings,
    parse_days,
    parse_thresholds,
)

_SPARK_DEFAULTS = SparkSettings()
_PREPROC_DEFAULTS = PreprocConfig(raw_dir="", out_dir="")


def _env(name: str, default):
    return os.environ.get(name, default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        allow_abbrev=False,  # flags are typed whole: what one applies to is checked on its name
        prog="python -m preproc_spark3",
        description="Raw Criteo 1TB click-log days (day_0 .. day_23) -> split-binary DLRM dataset, with Spark 3.")
    p.add_argument("raw_dir", help="directory holding day_<N> files (or day_<N>.gz / day_<N>.bz2)")
    p.add_argument("out_dir", help="dataset directory to write (feature_spec.yaml, train/, test/, validation/)")
    p.add_argument("--frequency_threshold", type=parse_thresholds, default=_PREPROC_DEFAULTS.thresholds,
                   help="T, or T with per-feature overrides like '15,C3:3,C20:0'; values seen < T times -> id 0")
    p.add_argument("--train_days", type=parse_days, default=_PREPROC_DEFAULTS.train_days,
                   help="training days, e.g. '0-22' (the N of day_N)")
    p.add_argument("--eval_day", type=argtypes.count, default=_PREPROC_DEFAULTS.eval_day,
                   help="day split by line count into test (first half) and validation (second half)")
    p.add_argument("--dictionary_from_all_days", action="store_true",
                   help="NVIDIA compatibility: count the vocabulary over the evaluation day too (leaks it)")
    p.add_argument("--log_offset", type=argtypes.positive_number, default=_PREPROC_DEFAULTS.log_offset,
                   help="numericals -> log(x + offset); NVIDIA TF2 uses 3")
    p.add_argument("--no_shuffle", action="store_true", help="keep the training rows in input (day, line) order")
    p.add_argument("--seed", type=argtypes.seed, default=_PREPROC_DEFAULTS.seed,
                   help="seed of the global training shuffle")
    p.add_argument("--max_malformed_fraction", type=argtypes.non_negative_number,
                   default=_PREPROC_DEFAULTS.max_malformed_fraction,
                   help="fail if more than this fraction of all lines is malformed")
    p.add_argument("--conversion_batch_rows", type=argtypes.positive_int,
                   default=_PREPROC_DEFAULTS.conversion_batch_rows,
                   help="rows a chunk task transforms and writes at a time (bounds its memory)")
    p.add_argument("--rows_per_chunk", type=argtypes.positive_int, default=_PREPROC_DEFAULTS.rows_per_chunk,
                   help="target rows per output chunk: each chunk is written by one task, in parallel")
    p.add_argument("--parquet", action="store_true",
                   help="also write the transformed rows as parquet (<out_dir>/parquet/split=<name>/)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the dataset out_dir holds (written aside, renamed into place when complete)")
    p.add_argument("--keep_work", action="store_true",
                   help="keep the lookup arrays and per-chunk files in <out_dir>/_work")

    add_spark_arguments(p)
    return p


def add_spark_arguments(p: argparse.ArgumentParser) -> None:
    """The Spark session's flags (and their PREPROC_* environment defaults), shared by every Spark job here."""
    s = p.add_argument_group("Spark (flags override the PREPROC_* environment variables)")
    s.add_argument("--master", default=_env("PREPROC_SPARK_MASTER", _SPARK_DEFAULTS.master),
                   help="Spark master: local[*] (default), local[N], spark://host:7077, yarn, ...")
    s.add_argument("--driver_memory", default=_env("PREPROC_DRIVER_MEMORY", _SPARK_DEFAULTS.driver_memory),
                   help="in local mode the driver runs every task: give it most of the memory")
    s.add_argument("--executor_memory", default=_env("PREPROC_EXECUTOR_MEMORY", _SPARK_DEFAULTS.executor_memory))
    # A string default: argparse converts it like a typed value, so a bad env value is a usage error.
    s.add_argument("--shuffle_partitions", type=argtypes.positive_int,
                   default=_env("PREPROC_SHUFFLE_PARTITIONS", str(_SPARK_DEFAULTS.shuffle_partitions)),
                   help="spark.sql.shuffle.partitions (env PREPROC_SHUFFLE_PARTITIONS); the job's own shuffle has one "
                        "partition per feature and per output chunk")
    s.add_argument("--local_dir", default=_env("PREPROC_LOCAL_DIR", _SPARK_DEFAULTS.local_dir),
                   help="spill / shuffle directory (fast local disk with room for ~2x the input)")
    s.add_argument("--max_partition_bytes", default=_env("PREPROC_MAX_PARTITION_BYTES",
                                                         _SPARK_DEFAULTS.max_partition_bytes),
                   help="at most this many bytes of an uncompressed day file per parse task, e.g. 128m (less for "
                        f"small inputs: 4 tasks per slot; a .gz/.bz2 file is one task); {SIZE_UNITS}")
    s.add_argument("--spark_conf", action="append", default=[], metavar="KEY=VALUE",
                   help="any other Spark property (repeatable), applied last")
    g = p.add_argument_group("GPU (RAPIDS Accelerator for Apache Spark)")
    g.add_argument("--gpu", action="store_true", help="run the SQL stages on GPUs (needs --rapids_jar)")
    g.add_argument("--rapids_jar", default=_env(RAPIDS_JAR_ENV, _SPARK_DEFAULTS.rapids_jar),
                   help=f"rapids-4-spark_2.12-<version>.jar (or env {RAPIDS_JAR_ENV})")
    g.add_argument("--gpu_discovery_script", default=_SPARK_DEFAULTS.gpu_discovery_script,
                   help="prints the host's GPUs as JSON; default preproc_spark3/get_gpus_resources.sh")
    g.add_argument("--gpus_per_executor", type=int, default=_SPARK_DEFAULTS.gpus_per_executor)
    g.add_argument("--concurrent_gpu_tasks", type=int, default=_SPARK_DEFAULTS.concurrent_gpu_tasks)


def _spark_conf_pairs(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PreprocessError(f"--spark_conf {item!r}: expected KEY=VALUE")
        pairs.append((key.strip(), value))
    return tuple(pairs)


GPU_FLAGS = ("--rapids_jar", "--gpu_discovery_script", "--gpus_per_executor", "--concurrent_gpu_tasks")


def spark_settings(parser: argparse.ArgumentParser, argv: Sequence[str], a: argparse.Namespace,
                   jvm_options: str = _SPARK_DEFAULTS.jvm_options) -> SparkSettings:
    """The parsed `add_spark_arguments` flags -> SparkSettings (with the job's `jvm_options`); a typed flag that
    would change nothing is refused."""
    argtypes.refuse_unless(parser, argv, a.gpu, GPU_FLAGS, "not used without --gpu")
    argtypes.refuse_unless(parser, argv, not re.fullmatch(r"local(\[.*\])?", a.master), ("--executor_memory",),
                           f"not used by --master {a.master} (in local mode the driver runs every task: "
                           f"see --driver_memory)")
    return SparkSettings(master=a.master, driver_memory=a.driver_memory, executor_memory=a.executor_memory,
                         shuffle_partitions=a.shuffle_partitions, local_dir=a.local_dir,
                         max_partition_bytes=a.max_partition_bytes, gpu=a.gpu, rapids_jar=a.rapids_jar,
                         gpu_discovery_script=a.gpu_discovery_script, gpus_per_executor=a.gpus_per_executor,
                         concurrent_gpu_tasks=a.concurrent_gpu_tasks, jvm_options=jvm_options,
                         extra_conf=_spark_conf_pairs(a.spark_conf))


def parse_config(argv: Optional[Sequence[str]] = None) -> PreprocConfig:
    """Flags -> PreprocConfig; a typed flag that would change nothing is refused (exit 2)."""
    parser, argv = build_parser(), argtypes.command_line(argv)
    a = parser.parse_args(argv)
    argtypes.refuse_unless(parser, argv, not a.no_shuffle, ("--seed",), "not used with --no_shuffle (it seeds the "
                           "training rows' shuffle)")
    spark = spark_settings(parser, argv, a)
    config = PreprocConfig(raw_dir=a.raw_dir, out_dir=a.out_dir, thresholds=a.frequency_threshold,
                           train_days=a.train_days, eval_day=a.eval_day,
                           dictionary_from_all_days=a.dictionary_from_all_days, log_offset=a.log_offset,
                           shuffle=not a.no_shuffle, seed=a.seed, max_malformed_fraction=a.max_malformed_fraction,
                           conversion_batch_rows=a.conversion_batch_rows,
                           rows_per_chunk=a.rows_per_chunk, write_parquet=a.parquet, keep_work=a.keep_work,
                           overwrite=a.overwrite,
                           spark=spark)
    config.validate()
    return config


def run_job(argv: Optional[Sequence[str]], parse: Callable[[Optional[Sequence[str]]], Any],
            job: str) -> Optional[Any]:
    """Parse the flags and run `job` ("module:function", imported late: flag errors need no Spark or data
    layer); its result, or None after a user's mistake (bad input or settings), printed as one line."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    module, function = job.split(":")
    try:
        config = parse(argv)
        return getattr(importlib.import_module(module), function)(config)
    except (PreprocessError, DataError, OutputDirError) as e:  # bad input / settings: one message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    result = run_job(argv, parse_config, "preproc_spark3.pipeline:run")
    if result is None:
        return 2
    print(f"dataset written to {result.out_dir}: rows {result.rows}, cardinalities {result.cardinalities}; "
          f"{result.malformed.describe()}")
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
