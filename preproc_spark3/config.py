"""Typed configuration of the preprocessing job and the Spark session it runs in.

Flags and environment variables become these dataclasses in exactly one place (`preproc_spark3.cli`);
the stages receive the dataclass they need.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

from dlrm.data.synthetic.criteo import NUM_CATEGORICAL, NUM_NUMERICAL
from dlrm.sizes import SizeError, parse_bytes

LABEL = "label"
NUMERICAL_COLUMNS = tuple(f"I{i}" for i in range(1, NUM_NUMERICAL + 1))
CATEGORICAL_COLUMNS = tuple(f"C{i}" for i in range(1, NUM_CATEGORICAL + 1))
RAW_FIELD_COUNT = 1 + NUM_NUMERICAL + NUM_CATEGORICAL  # 40 tab-separated fields per raw line

# Names of the output splits. Day 23 (the evaluation day) is split by line count: its first half is
# `test` (what training evaluates on, as in MLPerf), its second half `validation`.
TRAIN, TEST, VALIDATION = "train", "test", "validation"
SPLITS = (TRAIN, TEST, VALIDATION)

RAPIDS_JAR_ENV = "RAPIDS_PLUGIN_JAR"

# The driver's and executors' JVM flags, per kind of job. Where the work runs in Python workers (the Criteo
# job), the JVM only schedules and moves bytes: the C1 compiler alone costs less CPU than C2's compile threads
# save. Where the work is the JVM's own generated code (the Outbrain job's joins and aggregates), C2's
# optimised code and the throughput collector win (docs/preprocessing.md, "Spark settings").
PYTHON_TASKS_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
JVM_TASKS_JVM_OPTIONS = "-XX:+UseParallelGC"


class PreprocessError(RuntimeError):
    """Bad input or configuration; the message names the file / feature / line concerned."""


class MalformedInputError(PreprocessError):
    """More malformed lines than the configured fraction allows."""


@dataclass
class SparkSettings:
    """Spark session settings. Defaults suit a 2-core / 24 GiB machine (local mode: all in the driver)."""

    master: str = "local[*]"
    driver_memory: str = "8g"
    executor_memory: str = "8g"  # ignored in local mode (the driver runs the tasks)
    shuffle_partitions: int = 16
    local_dir: Optional[str] = None  # spill / shuffle files; None -> Spark's default (/tmp)
    max_partition_bytes: str = "128m"  # size of one raw-input split (uncompressed files), read by `partition_bytes`
    gpu: bool = False
    rapids_jar: Optional[str] = None
    gpu_discovery_script: Optional[str] = None  # None -> preproc_spark3/get_gpus_resources.sh
    gpus_per_executor: int = 1
    concurrent_gpu_tasks: int = 2
    jvm_options: str = PYTHON_TASKS_JVM_OPTIONS  # the driver's and executors' extraJavaOptions
    extra_conf: tuple[tuple[str, str], ...] = ()  # --spark_conf key=value, applied last


@dataclass
class PreprocConfig:
    raw_dir: str
    out_dir: str
    # Per-feature frequency thresholds, in CATEGORICAL_COLUMNS order (see parse_thresholds).
    thresholds: tuple[int, ...] = (0,) * NUM_CATEGORICAL
    train_days: tuple[int, ...] = tuple(range(23))
    eval_day: int = 23
    # NVIDIA compatibility: count the vocabulary over all days (leaks the evaluation day into it).
    dictionary_from_all_days: bool = False
    log_offset: float = 1.0  # numericals: log(x + log_offset); NVIDIA's TF2 scripts use 3
    shuffle: bool = True
    seed: int = 12345
    max_malformed_fraction: float = 1e-4
    conversion_batch_rows: int = 65_536  # rows a chunk task transforms and writes at a time (bounds its memory)
    rows_per_chunk: int = 524_288  # target rows per output chunk (one executor writes one chunk)
    write_parquet: bool = False  # also write the transformed rows as parquet under <out_dir>/parquet
    keep_work: bool = False  # keep the lookup arrays and per-chunk files under <out_dir>/_work
    overwrite: bool = False  # replace an earlier dataset in out_dir
    spark: SparkSettings = field(default_factory=SparkSettings)

    @property
    def dictionary_days(self) -> tuple[int, ...]:
        """Days whose values make the vocabulary: the training days (all days for NVIDIA compatibility)."""
        return self.all_days if self.dictionary_from_all_days else self.train_days

    @property
    def all_days(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.train_days) | {self.eval_day}))

    def validate(self) -> None:
        if len(self.thresholds) != NUM_CATEGORICAL or any(t < 0 for t in self.thresholds):
            raise PreprocessError(f"need {NUM_CATEGORICAL} non-negative thresholds, got {self.thresholds}")
        if not self.train_days:
            raise PreprocessError("no training days given")
        if self.eval_day in self.train_days:
            raise PreprocessError(f"evaluation day {self.eval_day} is also a training day")
        if not 0.0 <= self.max_malformed_fraction <= 1.0:
            raise PreprocessError(f"max_malformed_fraction must be in [0, 1], got {self.max_malformed_fraction}")
        if self.rows_per_chunk < 1 or self.conversion_batch_rows < 1:
            raise PreprocessError(f"rows_per_chunk and conversion_batch_rows must be >= 1, got "
                                  f"{self.rows_per_chunk}, {self.conversion_batch_rows}")
        if self.log_offset <= 0:
            raise PreprocessError(f"log_offset must be > 0, got {self.log_offset}")
        check_spark_settings(self.spark)


def check_spark_settings(settings: SparkSettings) -> None:
    """The Spark flags every job checks before starting a JVM: the split size, and GPU mode's jar."""
    partition_bytes(settings)
    check_gpu_settings(settings)


def partition_bytes(settings: SparkSettings) -> int:
    """`--max_partition_bytes` in bytes (> 0), read with the size grammar of every CLI (`dlrm.sizes`:
    `128m`, `1g`, `512MiB`, all powers of 1024)."""
    try:
        value = parse_bytes(settings.max_partition_bytes)
    except SizeError as error:
        raise PreprocessError(f"--max_partition_bytes: {error}") from None
    if value < 1:
        raise PreprocessError(f"--max_partition_bytes: expected a memory size above 0, got "
                              f"{settings.max_partition_bytes!r}")
    return value


def check_gpu_settings(settings: SparkSettings) -> None:
    """GPU mode needs the RAPIDS Accelerator jar; stop before starting Spark if it is missing."""
    if settings.gpu:
        rapids_jar(settings)


def rapids_jar(settings: SparkSettings) -> str:
    """The RAPIDS Accelerator jar GPU mode runs with; an error naming the flag if it is missing."""
    jar = settings.rapids_jar
    if not jar:
        raise PreprocessError(
            "GPU mode needs the RAPIDS Accelerator for Apache Spark jar, which is not bundled: download "
            "rapids-4-spark_2.12-<version>.jar (https://nvidia.github.io/spark-rapids/) and pass "
            f"--rapids_jar /path/to/it or set {RAPIDS_JAR_ENV}=/path/to/it")
    if not os.path.isfile(jar):
        raise PreprocessError(f"RAPIDS Accelerator jar not found: {jar} (from --rapids_jar / {RAPIDS_JAR_ENV})")
    return jar


def parse_thresholds(text: str) -> tuple[int, ...]:
    """`"15"` -> 15 for every feature; `"15,C3:3,C20:0"` -> 15 except the named features."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or ":" in parts[0]:
        raise PreprocessError(f"frequency threshold {text!r}: expected a default first, e.g. '15' or '15,C3:3'")
    try:
        default = int(parts[0])
    except ValueError:
        raise PreprocessError(f"frequency threshold {text!r}: {parts[0]!r} is not an integer") from None
    values = [default] * NUM_CATEGORICAL
    for part in parts[1:]:
        match = re.fullmatch(r"(C\d+):(\d+)", part)
        if not match or match.group(1) not in CATEGORICAL_COLUMNS:
            raise PreprocessError(
                f"frequency threshold {text!r}: override {part!r} must look like C<1..{NUM_CATEGORICAL}>:<int>")
        values[CATEGORICAL_COLUMNS.index(match.group(1))] = int(match.group(2))
    if any(v < 0 for v in values):
        raise PreprocessError(f"frequency threshold {text!r}: thresholds must be >= 0")
    return tuple(values)


def parse_days(text: str) -> tuple[int, ...]:
    """`"0-22"` or `"0,1,5-7"` -> sorted day numbers (the N of raw file `day_N`)."""
    days: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise PreprocessError(f"days {text!r}: {part!r} is not a day number or range like 0-22")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise PreprocessError(f"days {text!r}: empty range {part!r}")
        days.update(range(first, last + 1))
    return tuple(sorted(days))
