"""Typed settings of the Outbrain job: the flags become one OutbrainConfig in `cli`, the stages read it."""
from __future__ import annotations

from dataclasses import dataclass, field

from dlrm.data.outbrain import CTR_THRESHOLDS
from preproc_spark3.config import JVM_TASKS_JVM_OPTIONS, PreprocessError, SparkSettings, check_spark_settings

TRAIN, TEST = "train", "test"  # the dataset's mappings (main.py --arch widedeep trains on train, tests on test)
PARQUET_SPLITS = {TRAIN: "train", TEST: "valid"}  # NVIDIA's parquet directory of each mapping


@dataclass
class OutbrainConfig:
    raw_dir: str
    out_dir: str
    seed: int = 0  # the split draw and the train order: xxhash64(seed, ...)
    ctr_thresholds: dict[str, int] = field(default_factory=lambda: dict(CTR_THRESHOLDS))
    max_malformed_fraction: float = 1e-4  # of all data lines (headers excluded), quarantined for any reason
    write_parquet: bool = False  # also NVIDIA's parquet layout under <out_dir>/parquet/{train,valid}
    overwrite: bool = False
    batch_rows: int = 65_536  # rows the driver converts and writes at a time
    # The work is Spark SQL's generated code in the JVM: the C2 compiler and the throughput collector.
    spark: SparkSettings = field(default_factory=lambda: SparkSettings(jvm_options=JVM_TASKS_JVM_OPTIONS))

    def validate(self) -> None:
        if set(self.ctr_thresholds) != set(CTR_THRESHOLDS) or any(t < 0 for t in self.ctr_thresholds.values()):
            raise PreprocessError(f"CTR thresholds must be >= 0 for exactly {list(CTR_THRESHOLDS)}, got "
                                  f"{self.ctr_thresholds}")
        if not 0.0 <= self.max_malformed_fraction <= 1.0:
            raise PreprocessError(f"max_malformed_fraction must be in [0, 1], got {self.max_malformed_fraction}")
        if self.batch_rows < 1:
            raise PreprocessError(f"batch_rows must be >= 1, got {self.batch_rows}")
        check_spark_settings(self.spark)


def parse_ctr_threshold(text: str) -> tuple[str, int]:
    """`FEATURE=N` (one --ctr_threshold override) -> (feature, N)."""
    name, sep, value = text.partition("=")
    if not sep or name not in CTR_THRESHOLDS:
        raise PreprocessError(f"--ctr_threshold {text!r}: expected FEATURE=N with FEATURE one of "
                              f"{', '.join(CTR_THRESHOLDS)}")
    if not (value.isascii() and value.isdigit()):
        raise PreprocessError(f"--ctr_threshold {text!r}: {value!r} is not an integer >= 0")
    return name, int(value)
