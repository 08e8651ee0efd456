"""The whole Outbrain job: raw CSVs -> quarantine + split-binary Wide & Deep dataset (+ parquet).

Stages: find the files and check their headers (before Spark starts); read and type them (`raw`); keep the
good rows (`bad_rows`) and write the quarantine, failing above --max_malformed_fraction; compute the features
(`features`); stream train then test to the writer in order (`output`); feature_spec.yaml last.

The output directory follows the Criteo job's rule (preproc_spark3.pipeline): written beside `out_dir`
(`<out_dir>.tmp-<pid>`) and renamed into place complete; a failed run leaves `out_dir` as it was and keeps
its quarantine and report in the staging directory.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from dlrm.atomic import write_text_atomically
from dlrm.data.format.writer import dataset_dir
from dlrm.data.outbrain import BAD_ROW_REASONS
from preproc_spark3.config import PreprocessError, partition_bytes
from preproc_spark3.outbrain.bad_rows import keep_rows
from preproc_spark3.outbrain.config import TEST, TRAIN, OutbrainConfig
from preproc_spark3.outbrain.features import IS_TRAIN, TEST_ORDER, TRAIN_ORDER, feature_rows
from preproc_spark3.outbrain.output import dataset_spec, write_quarantine, write_split
from preproc_spark3.outbrain.raw import find_raw_files, read_table
from preproc_spark3.quarantine import QUARANTINE_FILE, MalformedSummary, check_malformed_fraction
from preproc_spark3.session import run_staged, timed_stage

REPORT_FILE = "preprocess_report.json"


@dataclass
class OutbrainResult:
    out_dir: str
    lines: dict[str, int]  # data lines per raw file (headers excluded)
    quarantined: Optional[MalformedSummary] = None
    rows: dict[str, int] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def bad_rows(self) -> dict[str, int]:
        """Quarantined rows per BAD_ROW_REASONS reason (unreadable lines are counted by kind in `quarantined`)."""
        by_kind = self.quarantined.by_kind if self.quarantined else {}
        return {reason: by_kind.get(reason, 0) for reason in BAD_ROW_REASONS}

    def to_dict(self) -> dict:
        return {"out_dir": self.out_dir, "lines": self.lines, "rows": self.rows, "bad_rows": self.bad_rows,
                "quarantined": self.quarantined.to_dict() if self.quarantined else None,
                "stage_seconds": self.stage_seconds}


def run(config: OutbrainConfig, spark: Any = None) -> OutbrainResult:
    """Run every stage; uses `spark` if given (tests share one session), else starts and stops one."""
    config.validate()
    output = dataset_dir(config.out_dir, "out_dir")
    output.check(config.overwrite)
    raw, out = os.path.realpath(config.raw_dir), os.path.realpath(config.out_dir)
    if os.path.commonpath([raw, out]) == out:
        raise PreprocessError(f"raw_dir {config.raw_dir} is inside out_dir {config.out_dir}, which the job replaces: "
                              "write the dataset elsewhere")
    files = find_raw_files(config.raw_dir)  # a missing file is named before Spark starts
    result = run_staged(output, config.overwrite, (QUARANTINE_FILE, REPORT_FILE), config.spark, spark,
                        lambda session, staging: _run_stages(session, config, files, staging))
    result.out_dir = os.path.abspath(config.out_dir)
    if result.quarantined is not None:
        result.quarantined.quarantine_file = os.path.join(result.out_dir, QUARANTINE_FILE)
    _write_report(result.out_dir, config, result)
    return result


def _run_stages(spark, config: OutbrainConfig, files, out: str) -> OutbrainResult:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    seconds: dict[str, float] = {}
    max_bytes = partition_bytes(config.spark)
    tables = {stem: read_table(spark, raw, max_bytes).persist(StorageLevel.MEMORY_AND_DISK)
              for stem, raw in files.items()}
    try:
        with timed_stage("read", seconds):
            counts = [table.groupBy().count().select(F.lit(stem).alias("stem"), "count")
                      for stem, table in tables.items()]
            counted = counts[0]
            for frame in counts[1:]:
                counted = counted.unionByName(frame)
            lines = {stem: int(count) for stem, count in counted.collect()}
        result = OutbrainResult(out, lines, stage_seconds=seconds)
        try:
            with timed_stage("quarantine", seconds):
                kept = keep_rows(tables, files)
                result.quarantined = write_quarantine(kept.quarantine, config.raw_dir, out, sum(lines.values()))
            check_malformed_fraction(result.quarantined, config.max_malformed_fraction)
            with timed_stage("features", seconds):
                rows = feature_rows(kept, config.seed, config.ctr_thresholds, inputs_read=lambda: _unpersist(tables))
            spec = dataset_spec(out)
            with timed_stage("write", seconds):
                for mapping, condition, order in ((TRAIN, F.col(IS_TRAIN), TRAIN_ORDER),
                                                  (TEST, ~F.col(IS_TRAIN), TEST_ORDER)):
                    ordered = rows.where(condition).orderBy(*order)
                    result.rows[mapping] = write_split(ordered, out, spec, mapping, config.write_parquet,
                                                       config.batch_rows)
            spec.metadata.update(_spec_metadata(config, result))
            spec.save(out)  # last: its presence means the dataset is complete
        finally:
            _write_report(out, config, result)
    finally:
        _unpersist(tables)
    return result


def _unpersist(tables: dict[str, Any]) -> None:
    for table in tables.values():
        table.unpersist()


def _spec_metadata(config: OutbrainConfig, result: OutbrainResult) -> dict:
    return {"num_rows": dict(result.rows), "source": "outbrain_click_prediction_raw",
            "preprocessing": {"tool": "preproc_spark3.outbrain", "seed": config.seed,
                              "ctr_thresholds": dict(config.ctr_thresholds), "bad_rows": result.bad_rows,
                              "rules": "docs/preprocessing.md#the-feature-rules"}}


def _write_report(out: str, config: OutbrainConfig, result: OutbrainResult) -> None:
    report = {"config": asdict(config), **result.to_dict()}
    write_text_atomically(os.path.join(out, REPORT_FILE), json.dumps(report, indent=2, sort_keys=True))
