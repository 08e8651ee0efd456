"""Build the Spark session: CPU (local[*] or a given master) or GPU (RAPIDS Accelerator plugin)."""
from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

from dlrm.output_dir import OutputDir
from preproc_spark3.config import SparkSettings, rapids_jar

T = TypeVar("T")

DEFAULT_DISCOVERY_SCRIPT = Path(__file__).with_name("get_gpus_resources.sh")
PROJECT_ROOT = str(Path(__file__).resolve().parents[1])


def spark_conf(settings: SparkSettings) -> dict[str, str]:
    """The Spark properties for `settings` (pure function, so the GPU settings are testable on a CPU)."""
    conf = {
        "spark.master": settings.master,
        "spark.driver.memory": settings.driver_memory,
        "spark.executor.memory": settings.executor_memory,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # The shuffled blobs are hashes and floats: lz4 gains little (docs/benchmarks.md).
        "spark.shuffle.compress": "false",
        "spark.driver.extraJavaOptions": settings.jvm_options,
        "spark.executor.extraJavaOptions": settings.jvm_options,
    }
    if settings.local_dir:
        conf["spark.local.dir"] = settings.local_dir
    if settings.gpu:
        script = settings.gpu_discovery_script or str(DEFAULT_DISCOVERY_SCRIPT)
        conf.update({
            "spark.jars": rapids_jar(settings),
            "spark.plugins": "com.nvidia.spark.SQLPlugin",
            "spark.rapids.sql.enabled": "true",
            "spark.rapids.sql.concurrentGpuTasks": str(settings.concurrent_gpu_tasks),
            "spark.rapids.memory.pinnedPool.size": "2g",
            "spark.rapids.sql.explain": "NOT_ON_GPU",
            # Resource scheduling: each executor owns GPUs found by the discovery script; tasks share them.
            "spark.executor.resource.gpu.amount": str(settings.gpus_per_executor),
            "spark.executor.resource.gpu.discoveryScript": script,
            "spark.task.resource.gpu.amount": str(1.0 / max(1, settings.concurrent_gpu_tasks * 2)),
            "spark.driver.resource.gpu.amount": "1" if settings.master.startswith("local") else "0",
            "spark.driver.resource.gpu.discoveryScript": script,
        })
    for key, value in settings.extra_conf:
        conf[key] = value
    return conf


def start_session(settings: SparkSettings):
    """Start (or reuse) a SparkSession; workers use this interpreter so they see the same packages."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The writer tasks run this package's code in Spark's Python workers, which inherit this path.
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if PROJECT_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([PROJECT_ROOT, *filter(None, paths)])
    if settings.master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName("dlrm-preprocess")
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run_staged(output: OutputDir, overwrite: bool, kept_on_failure: Sequence[str], settings: SparkSettings,
               spark: Optional[Any], stages: Callable[[Any, str], T]) -> T:
    """`stages(spark, staging_dir)` of a job whose output follows the output-directory rule (dlrm.output_dir):
    written aside, renamed into place complete; a failed run leaves the target as it was and keeps
    `kept_on_failure` (its quarantine and report) in the staging directory, which the log names. Uses `spark`
    if given (tests share one session), else starts and stops one."""
    session = start_session(settings) if spark is None else spark
    try:
        with output.staged(overwrite, kept_on_failure=tuple(kept_on_failure)) as staging:
            os.makedirs(staging)
            return stages(session, staging)
    except BaseException:
        if os.path.isdir(output.staging):
            logging.getLogger("preproc_spark3").error("the failed run's quarantine and report are kept in %s",
                                                     output.staging)
        raise
    finally:
        if spark is None:
            session.stop()


@contextmanager
def timed_stage(name: str, seconds: dict[str, float]) -> Iterator[None]:
    """Log a stage and record its wall time in `seconds` (the report and the benchmarks read them)."""
    log = logging.getLogger("preproc_spark3")
    log.info("stage %s ...", name)
    start = time.perf_counter()
    yield
    seconds[name] = round(time.perf_counter() - start, 3)
    log.info("stage %s done in %.1f s", name, seconds[name])
