"""The whole job: raw day files -> quarantine + dictionary + split-binary dataset, with one shuffle.

Jobs (see docs/preprocessing.md): count the lines of every input split (raw_input); parse the splits
as the map side of one shuffle (parse_job); the first reduce job writes the quarantine file and the
dictionaries (dictionary_job); after the malformed-fraction check, the second reduce job, on the same
shuffled RDD (so Spark reuses the map output instead of parsing again), writes each output chunk
(to_binary); then each split's files are assembled from their chunks.

Output directory:
  feature_spec.yaml            written last (atomically): its presence means the dataset is complete
  train/ test/ validation/     split-binary files (label.bin, numerical.bin, cat_<i>.bin)
  parquet/split=<name>/        with --parquet: the transformed rows, part-<n>.parquet in row order
  dictionary/                  value -> id per feature: (feature, value, count, id), C1 is feature 0
  quarantine.jsonl             malformed lines with source file and line number
  preprocess_report.json       settings, line counts, malformed summary, cardinalities, rows, stage times
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dlrm.atomic import write_text_atomically
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import dataset_dir
from preproc_spark3.chunks import chunk_layout, first_half_lines
from preproc_spark3.config import (
    CATEGORICAL_COLUMNS,
    SPLITS,
    TEST,
    PreprocConfig,
    PreprocessError,
    partition_bytes,
)
from preproc_spark3.dictionary import one_row_warnings
from preproc_spark3.dictionary_job import DictionaryJob, collect_results
from preproc_spark3.parse_job import ParseJob, Partitions
from preproc_spark3.quarantine import QUARANTINE_FILE, MalformedSummary, check_malformed_fraction
from preproc_spark3.raw_input import find_day_files, plan_splits, split_bytes, split_line_count
from preproc_spark3.session import run_staged, timed_stage
from preproc_spark3.to_binary import ChunkJob, assemble_splits

log = logging.getLogger("preproc_spark3")
REPORT_FILE = "preprocess_report.json"


@dataclass
class PreprocessResult:
    out_dir: str
    lines_per_day: dict[int, int]
    malformed: MalformedSummary
    cardinalities: list[int] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    parse_tasks: int = 0  # parse task runs (one per input split: the reduce jobs reuse the map output)
    warnings: list[str] = field(default_factory=list)  # features left with a one-row table

    def to_dict(self) -> dict:
        return {"out_dir": self.out_dir, "lines_per_day": {str(k): v for k, v in self.lines_per_day.items()},
                "malformed": self.malformed.to_dict(), "cardinalities": self.cardinalities, "rows": self.rows,
                "stage_seconds": self.stage_seconds, "parse_tasks": self.parse_tasks, "warnings": self.warnings}


def run(config: PreprocConfig, spark=None) -> PreprocessResult:
    """Run every stage; uses `spark` if given (tests share one session), else starts and stops one.

    The dataset follows the output-directory rule (`dlrm.output_dir`): written aside, then renamed into
    place complete; an earlier dataset is replaced only with --overwrite. A failed run leaves the target as
    it was and keeps its quarantine and report beside it (`<out_dir>.tmp-<pid>`, which its log names)."""
    config.validate()
    output = dataset_dir(config.out_dir, "out_dir")
    output.check(config.overwrite)
    day_files = find_day_files(config.raw_dir, config.all_days)
    kept = (QUARANTINE_FILE, REPORT_FILE, *(("_work",) if config.keep_work else ()))
    result = run_staged(output, config.overwrite, kept, config.spark, spark,
                        lambda session, staging: _run_stages(session, config, Path(staging), day_files))
    # The dataset is in place: its report names it (and the quarantine in it), not where it was written.
    result.out_dir = os.path.abspath(config.out_dir)
    result.malformed.quarantine_file = os.path.join(result.out_dir, QUARANTINE_FILE)
    _write_report(Path(result.out_dir), config, result)
    log.info("%s", result.malformed.describe())
    return result


def _identity(partition: int) -> int:
    return partition


def _run_stages(spark, config: PreprocConfig, out: Path, day_files) -> PreprocessResult:
    sc = spark.sparkContext
    seconds: dict[str, float] = {}
    work = out / "_work"
    shutil.rmtree(work, ignore_errors=True)
    try:  # success or failure (too many malformed lines, ...): drop the intermediate
        with timed_stage("count", seconds):  # lines per input split: line numbers, eval-day halves, chunks
            size = split_bytes(day_files, partition_bytes(config.spark), sc.defaultParallelism)
            splits = plan_splits(day_files, size)
            counts = sc.parallelize(splits, len(splits)).map(split_line_count).collect()
            lines_per_day = {day: 0 for day in day_files}
            first_lines, next_line = [], {day: 1 for day in day_files}
            for split, lines in zip(splits, counts):
                first_lines.append(next_line[split.day])
                next_line[split.day] += lines
                lines_per_day[split.day] += lines
            for day, count in lines_per_day.items():
                if count == 0:
                    raise PreprocessError(f"raw file {day_files[day]} has no lines")
        total_lines = sum(lines_per_day.values())
        layout = chunk_layout(config, lines_per_day)
        partitions = Partitions(sum(layout.counts))
        parse = ParseJob(config, layout, tuple(first_lines))
        runs = sc.accumulator(0)
        shuffled = (sc.parallelize(splits, len(splits))
                    .flatMap(lambda split: parse.run(split, runs))
                    .partitionBy(partitions.total, _identity))
        lookup_dir, staging = work / "lookup", work / "dictionary"
        for directory in (lookup_dir, staging):
            directory.mkdir(parents=True)
        with timed_stage("parse_dictionary", seconds):  # the map side, then quarantine + dictionaries
            dictionaries = DictionaryJob(config.raw_dir, str(out.resolve()), total_lines, config.thresholds,
                                         str(staging.resolve()), str(lookup_dir.resolve()))
            malformed, cardinalities = collect_results(
                sc.runJob(shuffled, dictionaries.run, partitions.small), len(CATEGORICAL_COLUMNS))
        result = PreprocessResult(str(out), lines_per_day, malformed, stage_seconds=seconds)
        try:  # report how far it got
            check_malformed_fraction(malformed, config.max_malformed_fraction)
            shutil.rmtree(out / "dictionary", ignore_errors=True)
            os.replace(staging, out / "dictionary")
            result.cardinalities = cardinalities
            result.warnings = one_row_warnings(cardinalities, config.thresholds, CATEGORICAL_COLUMNS)
            _build_dataset(spark, config, out, shuffled, partitions, layout, result, work)
            result.parse_tasks = runs.value
        finally:
            _write_report(out, config, result)
    finally:
        if not config.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    return result


def _build_dataset(spark, config: PreprocConfig, out: Path, shuffled, partitions: Partitions, layout,
                   result: PreprocessResult, work: Path) -> None:
    """The shuffled chunk blobs + the dictionaries -> split-binary files (+ parquet) and (last)
    feature_spec.yaml."""
    seconds = result.stage_seconds
    spec = FeatureSpec.criteo_like(result.cardinalities, mappings=SPLITS, base_directory=str(out))
    chunks = str((work / "chunks").resolve())
    parquet_dir = str((out / "parquet").resolve()) if config.write_parquet else None
    with timed_stage("write_chunks", seconds):  # order, ids; one task per chunk (the map output is reused)
        shutil.rmtree(out / "parquet", ignore_errors=True)
        job = ChunkJob(spec, chunks, layout, parquet_dir, str((work / "lookup").resolve()),
                       config.conversion_batch_rows)
        chunk_rows = dict(spark.sparkContext.runJob(shuffled, job.run, partitions.chunk_partitions))
    with timed_stage("to_binary", seconds):  # each split file = its chunks' files, one task per file
        result.rows = assemble_splits(spark, spec, str(out), chunks, layout, chunk_rows)
        malformed = result.malformed
        accounted = sum(result.rows.values()) + malformed.malformed_lines
        if accounted != malformed.total_lines:  # every raw line is a dataset row or a quarantined line
            raise PreprocessError(f"{malformed.total_lines} raw lines but {accounted} accounted for "
                                  f"(rows {result.rows} + {malformed.malformed_lines} malformed)")
        spec.metadata.update(_spec_metadata(config, result))
        spec.save(str(out))


def _spec_metadata(config: PreprocConfig, result: PreprocessResult) -> dict:
    eval_lines = result.lines_per_day[config.eval_day]
    return {
        "num_rows": dict(result.rows),
        "source": "criteo_1tb_raw",
        "preprocessing": {
            "tool": "preproc_spark3",
            "frequency_thresholds": dict(zip(CATEGORICAL_COLUMNS, config.thresholds)),
            "train_days": list(config.train_days),
            "eval_day": config.eval_day,
            "dictionary_days": list(config.dictionary_days),
            "test": f"day {config.eval_day} lines 1..{first_half_lines(eval_lines)} (first half)",
            "validation": f"day {config.eval_day} lines {first_half_lines(eval_lines) + 1}..{eval_lines} (second half)",
            "numerical_transform": f"log(max(x, 0) + {config.log_offset:g}), missing -> 0",
            "shuffle": {"enabled": config.shuffle, "seed": config.seed},
            "malformed_lines": result.malformed.malformed_lines,
            "eval_mapping": TEST,
        },
    }


def _write_report(out: Path, config: PreprocConfig, result: PreprocessResult) -> None:
    report = {"config": asdict(config), **result.to_dict()}
    write_text_atomically(out / REPORT_FILE, json.dumps(report, indent=2, sort_keys=True))
