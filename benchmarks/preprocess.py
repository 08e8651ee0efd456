"""Preprocessing benchmark: the Spark pipeline vs a single-process pyarrow/numpy baseline, same run.

Generates raw Criteo-format days (tests/support/criteo_raw.py: 40% / 40% / 20% of the rows; the last day
plays day 23; Criteo-shaped vocabularies from 10 to 300k values; a few malformed lines), then runs,
alternating, the full Spark pipeline (`python -m preproc_spark3`, local[2], JVM start included) and
benchmarks/preprocess_baseline.py (single process, everything in memory), each in a fresh process
whose peak memory is the sampled RSS of its whole process tree (Spark: Python driver + JVM + any
workers). Reports medians, the ratio, a cross-check of the two outputs, and a linear extrapolation of
the Spark throughput to the 4.37B-row dataset on N cores.

    python -m benchmarks.preprocess [--rows 1000000] [--repeats 2] [--threshold 3]

Writes benchmarks/results/preprocess.json and benchmarks/results/preprocess.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Optional

import psutil

from benchmarks.machine import (
    RESULTS,
    ROOT,
    alternate_windows,
    command_line,
    cpu_model,
    machine_facts,
    run_facts,
    utc_now,
    write_json,
    write_table,
)
from tests.support.criteo_raw import write_raw_days

CRITEO_ROWS = 4_373_472_329
# Criteo-shaped: a few large vocabularies, many small ones (26 features).
VOCABULARY_SIZES = [300_000, 20_000, 10_000, 5_000, 10_000, 4, 5_000, 1_000, 60, 200_000, 100_000, 50_000, 11,
                    2_000, 8_000, 100, 4, 900, 15, 300_000, 150_000, 250_000, 30_000, 8_000, 90, 35]


def measure(cmd: list[str], env: dict, timeout: float) -> dict:
    """Run `cmd`; wall time, and sampled every 50 ms over the process tree: peak RSS (summed) and CPU time
    (user + system, each process's last sample; less load-dependent than the wall time on a shared
    machine, and it misses at most the last 50 ms of each process)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    cpu: dict[int, float] = {}
    done = threading.Event()

    def sample():
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                tree = [root] + root.children(recursive=True)
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree if p.is_running()))
                for p in tree:
                    times = p.cpu_times()
                    cpu[p.pid] = times.user + times.system
            except psutil.Error:
                pass
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        done.set()
        sampler.join()
        if proc.poll() is None:
            proc.kill()
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    return {"seconds": seconds, "peak_rss_bytes": peak[0], "stdout": out,
            "cpu_seconds": sum(cpu.values())}


def compare_outputs(spark_dir: Path, base_dir: Path) -> dict:
    """Cardinalities and row counts equal; test/validation (unshuffled) byte-identical."""
    from dlrm.data.format.feature_spec import FeatureSpec

    a, b = FeatureSpec.load(str(spark_dir)), FeatureSpec.load(str(base_dir))
    same_files = all((spark_dir / split / f).read_bytes() == (base_dir / split / f).read_bytes()
                     for split in ("test", "validation") for f in os.listdir(spark_dir / split))
    same_train = sorted(os.listdir(spark_dir / "train")) == sorted(os.listdir(base_dir / "train"))
    return {"cardinalities_equal": a.cardinalities == b.cardinalities, "same_train_files": same_train,
            "rows_equal": a.metadata["num_rows"] == b.metadata["num_rows"],
            "eval_splits_byte_identical": same_files, "rows": a.metadata["num_rows"]}


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=2, help="alternating runs of each")
    p.add_argument("--threshold", type=int, default=3)
    p.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    p.add_argument("--one_core_rounds", type=int, default=1,
                   help="rounds that also run Spark local[1] (the observed scaling local[1] -> local[N])")
    p.add_argument("--driver_memory", default="6g")
    p.add_argument("--workdir", default="/tmp/dlrm_preprocess_bench")
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--timeout", type=float, default=1800)
    return p.parse_args(argv)


def raw_days(work: Path, rows: int) -> Path:
    """The raw days (generated once per row count): 40% / 40% / 20% of `rows`."""
    raw = work / f"raw_{rows}"
    per_day = [int(rows * 0.4), int(rows * 0.4), rows - 2 * int(rows * 0.4)]
    if not (raw / "day_2").exists():
        t = time.perf_counter()
        write_raw_days(raw, [0, 1, 2], per_day, seed=1, malformed_per_day=40, vocabulary_sizes=VOCABULARY_SIZES)
        print(f"generated {rows} rows in {time.perf_counter() - t:.0f} s", flush=True)
    return raw


def spark_command(a: argparse.Namespace, raw: Path, out: Path, cores: int) -> list[str]:
    return [sys.executable, "-m", "preproc_spark3", str(raw), str(out),
            "--frequency_threshold", str(a.threshold), "--train_days", "0-1", "--eval_day", "2",
            "--master", f"local[{cores}]", "--driver_memory", a.driver_memory,
            "--shuffle_partitions", str(8 * a.cores), "--max_malformed_fraction", "0.01"]


def commands(a: argparse.Namespace, raw: Path, work: Path) -> dict[str, list[str]]:
    """Pipeline name -> its command line, writing to work/out_<name>."""
    baseline = [sys.executable, "-m", "benchmarks.preprocess_baseline", str(raw),
                str(work / "out_baseline"), "--threshold", str(a.threshold), "--train_days", "0-1", "--eval_day", "2"]
    return {"spark": spark_command(a, raw, work / "out_spark", a.cores), "baseline": baseline,
            "spark_local1": spark_command(a, raw, work / "out_spark_local1", 1)}


def run_pipeline(name: str, cmd: list[str], work: Path, timeout: float) -> dict:
    """One run from an empty output directory: seconds, peak RSS, and Spark's own stage times."""
    out = work / f"out_{name}"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=ROOT)  # start_session sets PYSPARK_PYTHON and SPARK_LOCAL_IP
    m = measure(cmd, env, timeout)
    entry = {"seconds": round(m["seconds"], 2), "peak_rss_gib": round(m["peak_rss_bytes"] / 2**30, 3),
             "cpu_seconds": round(m["cpu_seconds"], 2), "load_average_1min": round(os.getloadavg()[0], 2)}
    if name.startswith("spark"):
        report = json.loads((out / "preprocess_report.json").read_text())
        entry["stage_seconds"] = report["stage_seconds"]
    return entry


def measure_pipelines(a: argparse.Namespace, raw: Path, work: Path) -> dict[str, list[dict]]:
    """Spark and the baseline in alternation, `a.repeats` runs each (Spark local[1] in the first
    `a.one_core_rounds` rounds too); name -> run entries."""
    runs = {name: partial(run_pipeline, name, cmd, work, a.timeout) for name, cmd in commands(a, raw, work).items()}

    def progress(round_index: int, windows: dict) -> None:
        for name, done in windows.items():
            if done:
                print(f"round {round_index} {name}: {done[-1].value}", flush=True)

    with_one_core = alternate_windows(runs, min(a.one_core_rounds, a.repeats), after_round=progress)
    two = {k: v for k, v in runs.items() if k != "spark_local1"}
    rest = alternate_windows(two, a.repeats - min(a.one_core_rounds, a.repeats), after_round=progress)
    return {name: [w.value for w in with_one_core[name] + rest.get(name, [])] for name in runs
            if with_one_core[name] or rest.get(name)}


def summarise(a: argparse.Namespace, argv: Optional[list[str]], raw_bytes: int, runs: dict[str, list[dict]],
              check: dict) -> dict:
    """The JSON report: medians, speeds, peak memory, and the extrapolation to the full dataset."""
    med = {k: statistics.median(e["seconds"] for e in v) for k, v in runs.items()}
    cpu = {k: statistics.median(e["cpu_seconds"] for e in v) for k, v in runs.items()}
    med_stages = statistics.median(sum(e["stage_seconds"].values()) for e in runs["spark"])
    stage_medians = {stage: statistics.median(e["stage_seconds"][stage] for e in runs["spark"])
                     for stage in runs["spark"][0]["stage_seconds"]}
    rate = {k: a.rows / s for k, s in med.items()}
    per_core = a.rows / med_stages / a.cores  # JVM start excluded: it does not grow with the data
    scaling = None
    if "spark_local1" in runs:
        one = statistics.median(sum(e["stage_seconds"].values()) for e in runs["spark_local1"])
        scaling = one / med_stages  # stage time on 1 core / on N cores (N would be perfect)
    return {
        "date": utc_now(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": cpu_model()},
        "command": command_line("benchmarks.preprocess", argv),
        "rows": a.rows, "raw_bytes": raw_bytes, "threshold": a.threshold, "spark_master": f"local[{a.cores}]",
        "runs": runs, "median_seconds": med, "rows_per_second": rate, "median_cpu_seconds": cpu,
        "load_average_1min_range": [min(e["load_average_1min"] for v in runs.values() for e in v),
                                    max(e["load_average_1min"] for v in runs.values() for e in v)],
        "spark_over_baseline_speed": rate["spark"] / rate["baseline"],
        "spark_stage_seconds_median": med_stages, "spark_stage_seconds_medians_by_stage": stage_medians,
        "spark_rows_per_second_per_core_excluding_jvm_start": per_core,
        "spark_speedup_local1_to_localN_stages": scaling, "cpu_flags": machine_facts()["flags"],
        "peak_rss_gib": {k: max(e["peak_rss_gib"] for e in v) for k, v in runs.items()}, "outputs_agree": check,
        "extrapolated_hours_4_37B_rows_by_cores": {str(n): round(CRITEO_ROWS / (per_core * n) / 3600, 2)
                                                   for n in (2, 16, 64, 128, 512)},
    }


def main(argv: Optional[list[str]] = None) -> None:
    a = parse_args(argv)
    work = Path(a.workdir)
    raw = raw_days(work, a.rows)
    raw_bytes = sum(f.stat().st_size for f in raw.iterdir())
    runs = measure_pipelines(a, raw, work)
    result = summarise(a, argv, raw_bytes, runs, compare_outputs(work / "out_spark", work / "out_baseline"))
    write_json(str(Path(a.results) / "preprocess.json"), result, indent=2)
    write_table(str(Path(a.results) / "preprocess.md"), _table(result, machine_facts()))


def _table(r: dict, facts: dict) -> list[str]:
    lines = [f"Preprocessing benchmark ({run_facts(r['date'], facts)}); `{r['command']}`", "",
             f"{r['rows']:,} raw rows ({r['raw_bytes'] / 2**20:.0f} MiB), threshold {r['threshold']}, "
             f"median of {len(r['runs']['spark'])} alternating runs each; outputs agree: "
             f"{all(v for k, v in r['outputs_agree'].items() if k != 'rows')}", "",
             f"1-minute load average after the runs: {r['load_average_1min_range'][0]:.1f}-"
             f"{r['load_average_1min_range'][1]:.1f} (2 cores, shared)", "",
             "| pipeline | median s | rows/s | median CPU s (process tree) | peak RSS (process tree) |",
             "|---|---|---|---|---|"]
    for name, label in (("spark", f"Spark {r['spark_master']} (full job incl. JVM start)"),
                        ("baseline", "pyarrow/numpy, 1 process, in memory"),
                        ("spark_local1", "Spark local[1] (full job incl. JVM start)")):
        if name not in r["median_seconds"]:
            continue
        lines.append(f"| {label} | {r['median_seconds'][name]:.1f} | {r['rows_per_second'][name]:,.0f} | "
                     f"{r['median_cpu_seconds'][name]:.1f} | {r['peak_rss_gib'][name]:.2f} GiB |")
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in r["spark_stage_seconds_medians_by_stage"].items())
    scaling = r["spark_speedup_local1_to_localN_stages"]
    lines += ["", f"Spark / baseline speed: **{r['spark_over_baseline_speed']:.2f}x**. Spark stages alone "
              f"(no JVM start): {r['spark_stage_seconds_median']:.1f} s = "
              f"{r['spark_rows_per_second_per_core_excluding_jvm_start']:,.0f} rows/s per core "
              f"(stage medians: {stages}).", "",
              (f"Stage time local[1] / local[{r['spark_master'][6:-1]}]: {scaling:.2f}x." if scaling else ""), "",
              "Linear extrapolation of the Spark stages to 4.37B rows at the local[N] rate per core (assumes "
              "per-core throughput holds; the one shuffle then goes through --local_dir disks and, on a cluster, "
              "the network, so read these as lower bounds):", "",
              "| cores | hours |", "|---|---|"]
    return lines + [f"| {n} | {h} |" for n, h in r["extrapolated_hours_4_37B_rows_by_cores"].items()]


if __name__ == "__main__":
    main()
