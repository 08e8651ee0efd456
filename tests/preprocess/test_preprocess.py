"""Spark preprocessing (preproc_spark3) against an independent reference, on real Spark (local[2]).

Three tiny generated "days": days 0 and 1 are the training days, day 2 plays day 23 (test/validation).
One Spark session serves the whole module; pipeline outputs are cached per scenario.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.output_dir import OutputDirError
from preproc_spark3.chunks import ChunkLayout
from preproc_spark3.cli import parse_config
from preproc_spark3.config import (
    MalformedInputError,
    PreprocConfig,
    PreprocessError,
    SparkSettings,
    parse_days,
    parse_thresholds,
)
from preproc_spark3.pipeline import REPORT_FILE, run
from preproc_spark3.session import spark_conf, start_session
from preproc_spark3.to_binary import ChunkRows, ChunkWriter, part_files
from tests.support import ROOT
from tests.support.criteo_raw import MALFORMED_KINDS, write_raw_days
from tests.support.reference_preprocess import reference_preprocess

pytestmark = pytest.mark.spark

TRAIN_DAYS, EVAL_DAY = (0, 1), 2
LINES = (300, 260, 201)  # odd evaluation day: test gets the extra line
MALFORMED_PER_DAY = 6
MAX_FRACTION = 0.05

# Tiny inputs: the C1 JIT alone warms up 3-4x faster on 2 busy cores (C2 pays off only on big data).
QUICK_JVM = ("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")

SCENARIOS = {
    # Several output chunks per split (written by different tasks, concatenated in order).
    "T0": dict(threshold="0", rows_per_chunk=64),
    "T2": dict(threshold="2"),
    # T=5 plus the other options: per-feature overrides (C5's above every count), log(x+3), vocabulary over all days.
    "T5_overrides_log3_alldays": dict(threshold="5,C2:0,C5:100000,C7:3", log_offset=3.0,
                                      dictionary_from_all_days=True),
}


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return write_raw_days(tmp_path_factory.mktemp("raw"), [0, 1, 2], LINES, seed=5,
                          malformed_per_day=MALFORMED_PER_DAY)


@pytest.fixture(scope="module")
def raw_dir(raw):
    return str(raw.paths[0].parent)


@pytest.fixture(scope="module")
def spark():
    session = start_session(SparkSettings(master="local[2]", driver_memory="1g", shuffle_partitions=4,
                                          extra_conf=(QUICK_JVM,)))
    yield session
    session.stop()


def _config(raw_dir, out_dir, threshold="2", shuffle=False, **options) -> PreprocConfig:
    return PreprocConfig(raw_dir=raw_dir, out_dir=str(out_dir), thresholds=parse_thresholds(threshold),
                         train_days=TRAIN_DAYS, eval_day=EVAL_DAY, shuffle=shuffle,
                         max_malformed_fraction=MAX_FRACTION, conversion_batch_rows=64, write_parquet=True,
                         **options)


@pytest.fixture(scope="module")
def outputs(spark, raw_dir, tmp_path_factory):
    """Scenario name -> (config, result), run once per module on first use."""
    cache = {}

    def get(name):
        if name not in cache:
            config = _config(raw_dir, tmp_path_factory.mktemp(name), **SCENARIOS[name])
            cache[name] = (config, run(config, spark))
        return cache[name]

    return get


def _parquet_split(out_dir, split) -> dict[str, np.ndarray]:
    tables = [pq.read_table(p) for p in part_files(Path(out_dir) / "parquet" / f"split={split}")]
    columns = {name: np.concatenate([t.column(name).to_numpy() for t in tables]) for name in tables[0].column_names}
    return {"label": columns["label"], "day": columns["day"], "line": columns["line"],
            "numerical": np.stack([columns[f"I{i}"] for i in range(1, 14)], axis=1),
            "categorical": np.stack([columns[f"C{i}"] for i in range(1, 27)], axis=1)}


def _binary_split(out_dir, split) -> dict[str, np.ndarray]:
    spec = FeatureSpec.load(str(out_dir))
    batches = list(BatchReader(spec, split, global_batch_size=97, prefetch=0))
    return {"label": np.concatenate([b.label for b in batches]),
            "numerical": np.concatenate([b.numerical for b in batches]),
            "categorical": np.concatenate([b.categorical for b in batches])}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_matches_reference_row_by_row(outputs, raw_dir, scenario):
    config, result = outputs(scenario)
    ref = reference_preprocess(raw_dir, TRAIN_DAYS, EVAL_DAY, list(config.thresholds), config.log_offset,
                               config.dictionary_from_all_days)
    assert result.cardinalities == ref.cardinalities
    spec = FeatureSpec.load(config.out_dir)
    assert spec.cardinalities == ref.cardinalities
    assert min(ref.cardinalities) >= 1 and max(ref.cardinalities) > 3  # thresholds leave real vocabularies
    expected_rows = {s: len(ref.splits[s]["label"]) for s in ref.splits}
    assert result.rows == expected_rows and spec.metadata["num_rows"] == expected_rows
    assert expected_rows["test"] + expected_rows["validation"] > 0.9 * LINES[2]

    for split, want in ref.splits.items():
        got = _parquet_split(config.out_dir, split)  # float32 as Spark computed them
        np.testing.assert_array_equal(got["day"], want["day"])
        np.testing.assert_array_equal(got["line"], want["line"])
        np.testing.assert_array_equal(got["label"], want["label"])
        np.testing.assert_array_equal(got["categorical"], want["categorical"])
        np.testing.assert_array_equal(got["numerical"], want["numerical"])
        stored = _binary_split(config.out_dir, split)  # through the data layer (numericals stored as float16)
        np.testing.assert_array_equal(stored["label"], want["label"])
        np.testing.assert_array_equal(stored["categorical"], want["categorical"])
        np.testing.assert_array_equal(stored["numerical"], want["numerical"].astype(np.float16).astype(np.float32))
    # The eval day is cut by raw line count: first half (incl. the middle line) test, second half validation.
    assert ref.splits["test"]["line"].max() <= 101 < ref.splits["validation"]["line"].min()


def test_threshold_zero_keeps_every_value_and_higher_thresholds_shrink(outputs, raw_dir):
    _, t0 = outputs("T0")
    _, t2 = outputs("T2")
    distinct = reference_preprocess(raw_dir, TRAIN_DAYS, EVAL_DAY, [0] * 26).cardinalities
    assert t0.cardinalities == distinct
    assert all(a <= b for a, b in zip(t2.cardinalities, t0.cardinalities))
    assert sum(t2.cardinalities) < sum(t0.cardinalities)


def test_a_threshold_above_every_count_is_warned_of(outputs):
    """A feature left with a one-row table (every value below its threshold) is named in the result and the
    report (the command line prints the same lines)."""
    config, result = outputs("T5_overrides_log3_alldays")
    assert [i for i, cardinality in enumerate(result.cardinalities) if cardinality == 1] == [4]
    assert result.warnings == [
        "feature C5: every value is seen fewer than 100000 times (its --frequency_threshold), so its table has 1 "
        "row and the feature carries no information; lower its threshold with an override in "
        "--frequency_threshold (e.g. C5:1)"]
    with open(os.path.join(config.out_dir, REPORT_FILE), encoding="utf-8") as f:
        assert json.load(f)["warnings"] == result.warnings
    assert outputs("T2")[1].warnings == []


def test_quarantine_lists_every_malformed_line(outputs, raw, raw_dir):
    config, result = outputs("T2")
    ref = reference_preprocess(raw_dir, TRAIN_DAYS, EVAL_DAY, list(config.thresholds))
    lines = Path(config.out_dir, "quarantine.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert records == [{"source_file": q.source_file, "line_number": q.line_number, "kind": q.kind,
                        "reason": q.reason, "raw_line": q.raw_line} for q in ref.quarantined]
    assert [(r["source_file"], r["line_number"], r["kind"]) for r in records] == \
        [(m.file, m.line, m.kind) for m in raw.malformed]
    summary = result.malformed
    assert summary.total_lines == sum(LINES) and summary.malformed_lines == 3 * MALFORMED_PER_DAY
    assert summary.by_kind == dict(Counter(m.kind for m in raw.malformed))
    assert sorted(summary.by_kind) == sorted(MALFORMED_KINDS)  # the generator injects every kind
    assert summary.by_file == {f"day_{d}": MALFORMED_PER_DAY for d in (0, 1, 2)}
    # Nothing dropped silently: good rows + quarantined lines = all lines.
    assert sum(result.rows.values()) + summary.malformed_lines == sum(LINES)
    report = json.loads(Path(config.out_dir, "preprocess_report.json").read_text())
    assert report["malformed"]["malformed_lines"] == 18 and report["rows"] == result.rows


def test_too_many_malformed_lines_fail_the_run(spark, raw_dir, tmp_path):
    config = _config(raw_dir, tmp_path / "out")
    config.max_malformed_fraction = 0.01  # 18 / 761 = 2.4% are malformed
    with pytest.raises(MalformedInputError) as failure:
        run(config, spark)
    message = str(failure.value)
    kept = tmp_path / f"out.tmp-{os.getpid()}"  # beside the target: the failed run's diagnostics only
    assert "18 of 761 lines malformed" in message and f"quarantined in {kept}/quarantine.jsonl" in message
    assert "--max_malformed_fraction" in message and f"{raw_dir}/day_0 line " in message
    assert not (tmp_path / "out").exists()  # no dataset from a failed run, nothing in the target
    assert sorted(os.listdir(kept)) == ["preprocess_report.json", "quarantine.jsonl"]  # no _work, no splits
    assert json.loads((kept / "preprocess_report.json").read_text())["malformed"]["malformed_lines"] == 18


def test_the_output_directory_rule(spark, outputs, raw_dir, tmp_path):
    """A file or a non-empty directory in the way is refused before any work; an earlier dataset is replaced
    whole with --overwrite (no file of it left), and a failed rerun leaves it as it was."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputDirError, match=f"out_dir {tmp_path / 'file'} exists and is not a directory"):
        run(_config(raw_dir, tmp_path / "file"), spark)
    config, _ = outputs("T2")
    with pytest.raises(OutputDirError, match=f"out_dir {config.out_dir} already holds a dataset: pass --overwrite"):
        run(_config(raw_dir, config.out_dir), spark)
    out = tmp_path / "dataset"
    shutil.copytree(config.out_dir, out)
    (out / "stale.bin").write_text("an earlier run's file")
    before = _read_files(out)
    failing = _config(raw_dir, out, overwrite=True)
    failing.max_malformed_fraction = 0.01
    with pytest.raises(MalformedInputError):
        run(failing, spark)
    assert _read_files(out) == before and (out / "stale.bin").exists()  # the earlier dataset, untouched
    result = run(_config(raw_dir, out, threshold="0", overwrite=True), spark)
    assert result.out_dir == str(out) and not (out / "stale.bin").exists()
    assert FeatureSpec.load(str(out)).cardinalities == outputs("T0")[1].cardinalities
    report = json.loads((out / "preprocess_report.json").read_text())
    assert report["out_dir"] == str(out) and report["malformed"]["quarantine_file"] == str(out / "quarantine.jsonl")


def _read_files(out_dir) -> dict[str, bytes]:
    return {str(p.relative_to(out_dir)): p.read_bytes() for p in sorted(Path(out_dir).glob("*/*.bin"))}


def test_shuffle_is_a_deterministic_permutation(spark, outputs, raw_dir, tmp_path):
    plain_config, _ = outputs("T2")
    shuffled = _config(raw_dir, tmp_path / "a", shuffle=True, seed=7)
    run(shuffled, spark)
    plain, mixed = _parquet_split(plain_config.out_dir, "train"), _parquet_split(shuffled.out_dir, "train")
    keys_plain = list(zip(plain["day"].tolist(), plain["line"].tolist()))
    keys_mixed = list(zip(mixed["day"].tolist(), mixed["line"].tolist()))
    assert keys_mixed != keys_plain and sorted(keys_mixed) == keys_plain  # same rows, other order
    order = np.lexsort((mixed["line"], mixed["day"]))
    for name in ("label", "numerical", "categorical"):
        np.testing.assert_array_equal(mixed[name][order], plain[name])
    for split in ("test", "validation"):  # evaluation rows keep their order
        np.testing.assert_array_equal(_parquet_split(shuffled.out_dir, split)["line"],
                                      _parquet_split(plain_config.out_dir, split)["line"])
    # Same seed, different partitioning and output chunks -> byte-identical dataset.
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        run(_config(raw_dir, tmp_path / "b", shuffle=True, seed=7, rows_per_chunk=50), spark)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    assert _read_files(tmp_path / "a") == _read_files(tmp_path / "b")


def test_part_files_are_read_in_part_number_order_and_other_files_skipped(tmp_path):
    """Spark's part files by their number (not by name: part-100000 comes after part-99999); its marker and
    checksum files, and a parquet file without a part number, are not rows of the split."""
    names = ["part-100000-a.snappy.parquet", "part-99999-b.snappy.parquet", "part-00002-c.parquet", "_SUCCESS",
             ".part-00001-d.parquet.crc", "part-unnumbered.parquet"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in part_files(tmp_path)] == [names[2], names[1], names[0]]


def test_chunk_writer_rejects_rows_out_of_order(tmp_path):
    """The chunk writer trusts no row order it has not checked (here across two batches of a chunk)."""

    def batch(lines):
        n = len(lines)
        return ChunkRows(np.zeros(n, np.int64), np.zeros(n, np.int32), np.array(lines, np.int64),
                         np.zeros(n, np.float32), np.full((n, 13), 0.5, np.float32), np.ones((n, 26), np.int32))

    def write(batches) -> int:
        writer = ChunkWriter(0, spec, str(tmp_path), layout, None)
        try:
            for rows in batches:
                writer.write(rows)
        except BaseException:
            writer.abort()
            raise
        return writer.close()

    spec = FeatureSpec.criteo_like([5] * 26, mappings=("train", "test", "validation"))
    layout = ChunkLayout((1, 1, 1), ((0, 4),), 1, 2)
    with pytest.raises(PreprocessError, match=r"row 2 of chunk 0 \(split train\) is out of"):
        write([batch([1, 3]), batch([2, 4])])
    assert not list(tmp_path.rglob("*.bin"))  # the writer aborted: nothing published
    assert write([batch([1, 2]), batch([3, 4])]) == 4


def test_flag_parsing():
    assert parse_thresholds("15") == (15,) * 26
    assert parse_thresholds("15,C3:3,C26:0") == (15, 15, 3) + (15,) * 22 + (0,)
    for bad in ("C3:3", "15,C27:1", "15,X:1", "abc", "15,C3:-1"):
        with pytest.raises(PreprocessError):
            parse_thresholds(bad)
    assert parse_days("0-22") == tuple(range(23)) and parse_days("0,2,5-6") == (0, 2, 5, 6)
    with pytest.raises(PreprocessError):
        parse_days("3-1")


def test_cli_defaults_are_the_config_defaults(monkeypatch):
    for name in [n for n in os.environ if n.startswith("PREPROC_") or n == "RAPIDS_PLUGIN_JAR"]:
        monkeypatch.delenv(name)
    assert parse_config(["raw", "out"]) == PreprocConfig(raw_dir="raw", out_dir="out")
    monkeypatch.setenv("PREPROC_SHUFFLE_PARTITIONS", "48")
    assert parse_config(["raw", "out"]).spark.shuffle_partitions == 48
    assert parse_config(["raw", "out", "--shuffle_partitions", "8"]).spark.shuffle_partitions == 8
    options = parse_config(["raw", "out", "--parquet", "--rows_per_chunk", "64"])
    assert options.write_parquet and options.rows_per_chunk == 64
    assert not PreprocConfig(raw_dir="raw", out_dir="out").write_parquet  # parquet is optional, off by default


def test_bad_environment_value_is_a_usage_error():
    env = dict(os.environ, PREPROC_SHUFFLE_PARTITIONS="many")
    done = subprocess.run([sys.executable, "-m", "preproc_spark3", "raw", "out"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(ROOT))
    assert done.returncode == 2, done.stderr
    assert "--shuffle_partitions: expected a positive integer, got 'many'" in done.stderr
    assert "Traceback" not in done.stderr


def test_gpu_settings_need_the_rapids_jar(tmp_path):
    with pytest.raises(PreprocessError, match="RAPIDS Accelerator"):
        spark_conf(SparkSettings(gpu=True))
    jar = tmp_path / "rapids-4-spark_2.12-24.08.1.jar"
    jar.write_bytes(b"")
    conf = spark_conf(SparkSettings(gpu=True, rapids_jar=str(jar), master="spark://head:7077"))
    assert conf["spark.plugins"] == "com.nvidia.spark.SQLPlugin" and conf["spark.jars"] == str(jar)
    assert conf["spark.executor.resource.gpu.amount"] == "1"
    assert os.access(conf["spark.executor.resource.gpu.discoveryScript"], os.X_OK)
    assert "spark.plugins" not in spark_conf(SparkSettings())


def test_each_job_gets_its_jvm_flags_and_spark_conf_overrides_them():
    """Criteo's work runs in Python workers (C1 JIT alone), Outbrain's in the JVM (C2, throughput collector)."""
    from preproc_spark3.cli import parse_config as criteo_config
    from preproc_spark3.outbrain.cli import parse_config as outbrain_config

    def jvm(config) -> tuple:
        conf = spark_conf(config.spark)
        return conf["spark.driver.extraJavaOptions"], conf["spark.executor.extraJavaOptions"]

    assert jvm(criteo_config(["raw", "out"])) == ("-XX:TieredStopAtLevel=1",) * 2
    assert jvm(outbrain_config(["raw", "out"])) == ("-XX:+UseParallelGC",) * 2
    overridden = outbrain_config(["raw", "out", "--spark_conf", "=".join(QUICK_JVM)])
    assert jvm(overridden)[0] == "-XX:TieredStopAtLevel=1"


def _script_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAPIDS_PLUGIN_JAR"}
    env["PYTHON"] = sys.executable
    return env


def test_prepare_dataset_gpu_without_jar_is_a_clear_error(raw_dir, tmp_path):
    done = subprocess.run(["bash", str(ROOT / "prepare_dataset.sh"), raw_dir, str(tmp_path / "out"), "15", "--gpu"],
                          capture_output=True, text=True, timeout=120, env=_script_env())
    assert done.returncode == 2
    assert "GPU mode needs the RAPIDS Accelerator" in done.stderr and "--rapids_jar" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out" / "feature_spec.yaml").exists()


@pytest.mark.slow
def test_prepare_dataset_then_train_with_main(raw_dir, tmp_path):
    """The shell entry point end to end, then the data layer and main.py consume the result."""
    out = tmp_path / "dataset"
    done = subprocess.run(
        ["bash", str(ROOT / "prepare_dataset.sh"), raw_dir, str(out), "2", "--master", "local[2]",
         "--driver_memory", "1g", "--shuffle_partitions", "4", "--train_days", "0-1", "--eval_day", "2",
         "--max_malformed_fraction", "0.05", "--spark_conf", "=".join(QUICK_JVM)],
        capture_output=True, text=True, timeout=400, env=_script_env())
    assert done.returncode == 0, done.stderr[-3000:]
    spec = FeatureSpec.load(str(out))
    reader = BatchReader(spec, "train", global_batch_size=128, prefetch=0)
    rows = sum(len(b.label) for b in reader)
    assert rows == spec.metadata["num_rows"]["train"] == sum(LINES[:2]) - 2 * MALFORMED_PER_DAY

    run_dir = tmp_path / "run"
    train = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), "--dataset_path", str(out), "--max_steps", "4",
         "--global_batch_size", "64", "--valid_batch_size", "128", "--embedding_dim", "8",
         "--bottom_mlp_dims", "16-8", "--top_mlp_dims", "16-1", "--optimizer", "adagrad", "--learning_rate", "0.05",
         "--warmup_steps", "0", "--log_every", "1", "--run_dir", str(run_dir), "--intra_op_threads", "2"],
        capture_output=True, text=True, timeout=400, cwd=str(tmp_path))
    assert train.returncode == 0, train.stderr[-3000:]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if "loss" in m]
    assert losses and all(np.isfinite(losses))


def test_shuffle_keys_are_sparks_xxhash64(spark):
    """The parse tasks' numpy key is Spark's own xxhash64(lit(seed), day, line), for int and long seeds."""
    from pyspark.sql import functions as F

    from preproc_spark3.shuffle_key import shuffle_keys

    rng = np.random.default_rng(3)
    day = rng.integers(-(2**31), 2**31, 200, dtype=np.int64).astype(np.int32)
    day[:3] = (0, 23, -1)
    line = rng.integers(-(2**63), 2**63 - 1, 200, dtype=np.int64)
    line[:3] = (1, 2**40, -7)
    frame = spark.createDataFrame(list(zip(day.tolist(), line.tolist())), "day int, line long")
    for seed in (0, 12345, 2**31 - 1, 2**31, 2**32 - 1, -5, -(2**40)):
        rows = frame.select(F.xxhash64(F.lit(seed), "day", "line").alias("key")).collect()
        np.testing.assert_array_equal(shuffle_keys(seed, day, line), [r["key"] for r in rows], err_msg=f"seed {seed}")


def test_reduce_jobs_reuse_the_parse_output(outputs):
    """Both reduce jobs read the one shuffle: each input split is parsed once (3 days, one split each)."""
    _, result = outputs("T2")
    assert result.parse_tasks == 3
    assert set(result.stage_seconds) == {"count", "parse_dictionary", "write_chunks", "to_binary"}


def _edge_case_days(plain: Path, packed: Path) -> None:
    """Three small days with CRLF and lone-CR terminators, empty lines and a last line without terminator,
    written plain (for the reference) and as day_0.gz, day_1 (plain), day_2.bz2 (for the pipeline)."""
    import bz2
    import gzip

    write_raw_days(plain, [0, 1, 2], (40, 30, 21), seed=9, malformed_per_day=2)
    days = [(plain / f"day_{d}").read_bytes().split(b"\n")[:-1] for d in range(3)]
    texts = [b"\r\n".join(days[0][:10] + [b""] + days[0][10:]) + b"\r\n",
             b"\r".join(days[1][:5]) + b"\r" + b"\n".join(days[1][5:]),  # lone CRs; no final terminator
             b"\n".join(days[2]) + b"\n\n"]  # a last empty line
    for d, text in enumerate(texts):
        (plain / f"day_{d}").write_bytes(text)
    packed.mkdir()
    (packed / "day_0.gz").write_bytes(gzip.compress(texts[0]))
    (packed / "day_1").write_bytes(texts[1])
    (packed / "day_2.bz2").write_bytes(bz2.compress(texts[2]))


def test_line_terminators_empty_lines_compression_and_small_splits(spark, tmp_path):
    """Lines as Spark's text reader cuts them (\\n, \\r\\n, lone \\r; empty lines; no final terminator), from
    .gz, .bz2 and plain files cut into 1 KiB splits, match the reference row by row."""
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    _edge_case_days(plain, packed)
    config = _config(str(packed), tmp_path / "out", threshold="0", rows_per_chunk=16,
                     spark=SparkSettings(max_partition_bytes="1k"))
    config.max_malformed_fraction = 0.5  # a tenth of these lines is malformed
    result = run(config, spark)
    ref = reference_preprocess(str(plain), TRAIN_DAYS, EVAL_DAY, [0] * 26)
    assert result.parse_tasks == 10  # day_1 (8 KiB) is cut into 8 splits; a compressed file is one
    assert result.lines_per_day == {0: 41, 1: 30, 2: 22}
    assert result.cardinalities == ref.cardinalities
    for split, want in ref.splits.items():
        got = _parquet_split(config.out_dir, split)
        for name in ("day", "line", "label", "categorical", "numerical"):
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{split} {name}")
    records = [json.loads(line) for line in Path(config.out_dir, "quarantine.jsonl").read_text().splitlines()]
    assert [(Path(r["source_file"]).name, r["line_number"], r["kind"], r["reason"], r["raw_line"]) for r in records] \
        == [(Path(q.source_file).name + {"day_0": ".gz", "day_2": ".bz2"}.get(Path(q.source_file).name, ""),
             q.line_number, q.kind, q.reason, q.raw_line) for q in ref.quarantined]


def test_bytes_that_are_not_utf8_are_quarantined_not_a_crash(spark, raw, raw_dir, tmp_path):
    """A raw line with a byte that is not UTF-8 is malformed: quarantined (U+FFFD for the byte), the run goes on."""
    bad_dir = tmp_path / "raw"
    bad_dir.mkdir()
    for day in (0, 1, 2):
        text = (Path(raw_dir) / f"day_{day}").read_bytes()
        if day == 1:
            first, rest = text.split(b"\n", 1)
            text = first.replace(b"\t", b"\t\xff", 1) + b"\n" + rest  # label field "\xff<label>"
        (bad_dir / f"day_{day}").write_bytes(text)
    config = _config(str(bad_dir), tmp_path / "out", threshold="0")
    result = run(config, spark)
    records = [json.loads(x) for x in Path(config.out_dir, "quarantine.jsonl").read_text().splitlines()]
    bad = [r for r in records if r["source_file"].endswith("day_1") and r["line_number"] == 1]
    assert len(bad) == 1 and "\ufffd" in bad[0]["raw_line"], bad
    assert sum(result.rows.values()) + result.malformed.malformed_lines == sum(LINES)
    assert Path(config.out_dir, "feature_spec.yaml").exists()


def test_unreadable_compression_is_one_clear_error(raw_dir, tmp_path):
    (tmp_path / "day_0.snappy").write_bytes(b"x")
    with pytest.raises(PreprocessError, match=r"day_0.snappy: compression '.snappy' is not supported"):
        run(_config(str(tmp_path), tmp_path / "out"))
