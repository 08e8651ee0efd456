"""Build the Spark session: CPU (local[*] or a given master) or GPU (RAPIDS Accelerator plugin)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from preproc_spark3.config import SparkSettings, rapids_jar

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
        # The shuffled blobs are hashes and floats (lz4 gains little) and the JVM only moves bytes: without
        # shuffle compression and with the C1 compiler alone the job used ~25% less CPU (docs/benchmarks.md).
        "spark.shuffle.compress": "false",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
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
