"""The whole job: raw day files -> quarantine + dictionary + parquet -> split-binary dataset.

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
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dlrm.atomic import write_text_atomically
from dlrm.data.feature_spec import SPEC_FILE_NAME, FeatureSpec
from preproc_spark3.chunks import chunk_layout
from preproc_spark3.config import CATEGORICAL_COLUMNS, SPLITS, TEST, PreprocConfig, PreprocessError
from preproc_spark3.dictionary import IdLookup, build_dictionary, cardinalities
from preproc_spark3.quarantine import MalformedSummary, check_malformed_fraction, write_quarantine
from preproc_spark3.raw_input import find_day_files, number_lines, read_lines
from preproc_spark3.session import start_session
from preproc_spark3.to_binary import assemble_splits, write_chunks
from preproc_spark3.transform import first_half_lines, looked_up_features, transform
from preproc_spark3.validate import parse_lines

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

    def to_dict(self) -> dict:
        return {"out_dir": self.out_dir, "lines_per_day": {str(k): v for k, v in self.lines_per_day.items()},
                "malformed": self.malformed.to_dict(), "cardinalities": self.cardinalities, "rows": self.rows,
                "stage_seconds": self.stage_seconds}


@contextmanager
def _stage(name: str, seconds: dict[str, float]):
    """Log a stage and record its wall time in `seconds` (the report and the benchmark read them)."""
    log.info("stage %s ...", name)
    start = time.perf_counter()
    yield
    seconds[name] = round(time.perf_counter() - start, 3)
    log.info("stage %s done in %.1f s", name, seconds[name])


def run(config: PreprocConfig, spark=None) -> PreprocessResult:
    """Run every stage; uses `spark` if given (tests share one session), else starts and stops one."""
    config.validate()
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / SPEC_FILE_NAME
    if spec_path.exists():
        spec_path.unlink()  # a failed rerun must not leave an old, complete-looking dataset behind
    day_files = find_day_files(config.raw_dir, config.all_days)
    own_session = spark is None
    if own_session:
        spark = start_session(config.spark)
    try:
        return _run_stages(spark, config, out, day_files)
    finally:
        if own_session:
            spark.stop()


def _run_stages(spark, config: PreprocConfig, out: Path, day_files) -> PreprocessResult:
    from pyspark.sql import functions as F

    seconds: dict[str, float] = {}
    work = out / "_work"
    # Rows per Arrow batch between the JVM and the Python workers (parse and binary writers).
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(config.conversion_batch_rows))

    try:  # success or failure (too many malformed lines, ...): drop the intermediate
        with _stage("parse", seconds):  # parsed once: the parse tasks store typed rows under _work/parsed
            rows, counts, blocks = parse_lines(spark, read_lines(spark, day_files), str((work / "parsed").resolve()),
                                               config.dictionary_days)
            numbered = number_lines(spark, rows, blocks, day_files)
            parsed = numbered.frame
        total_lines = sum(numbered.lines_per_day.values())
        with _stage("quarantine", seconds):
            malformed = write_quarantine(parsed, config.raw_dir, out, total_lines)
        result = PreprocessResult(str(out), numbered.lines_per_day, malformed, stage_seconds=seconds)
        log.info("%s", malformed.describe())
        try:  # report how far it got
            check_malformed_fraction(malformed, config.max_malformed_fraction)
            _build_dataset(spark, config, out, parsed.filter(F.col("reason").isNull()), counts, result, work)
        finally:
            _write_report(out, config, result)
    finally:
        if not config.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    return result


def _build_dataset(spark, config: PreprocConfig, out: Path, good, counts, result: PreprocessResult,
                   work: Path) -> None:
    """Well-formed parsed rows + the parse's value counts -> dictionary, split-binary files (+ parquet)
    and (last) feature_spec.yaml."""
    seconds = result.stage_seconds
    with _stage("dictionary", seconds):
        build_dictionary(counts, config.thresholds).write.mode("overwrite").parquet(str(out / "dictionary"))
        dictionary = spark.read.parquet(str(out / "dictionary"))
        result.cardinalities = cardinalities(dictionary)
    spec = FeatureSpec.criteo_like(result.cardinalities, mappings=SPLITS, base_directory=str(out))
    layout = chunk_layout(config, result.lines_per_day)
    chunks = str((work / "chunks").resolve())
    parquet_dir = str((out / "parquet").resolve()) if config.write_parquet else None
    with _stage("transform", seconds):  # numericals, order, ids; each task writes its chunks
        shutil.rmtree(out / "parquet", ignore_errors=True)
        shutil.rmtree(chunks, ignore_errors=True)
        lookup = IdLookup.read(str(out / "dictionary"), looked_up_features(result.cardinalities, config))
        frame = transform(good, dictionary, result.cardinalities, config, layout)
        chunk_rows = write_chunks(frame, spec, chunks, layout, parquet_dir, lookup)
    with _stage("to_binary", seconds):  # each split file = its chunks' files, one task per file
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
