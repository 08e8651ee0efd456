"""Preprocessing benchmark: the Spark pipeline vs a single-process pyarrow/numpy baseline, same run.

Generates raw Criteo-format days (tests/support/criteo_raw.py: 40% / 40% / 20% of the rows; the last day
plays day 23; Criteo-shaped vocabularies from 10 to 300k values; a few malformed lines), then runs,
alternating, the full Spark pipeline (`python -m preproc_spark3`, local[2], JVM start included) and
benchmarks/preprocess_baseline.py (single process, everything in memory), each in a fresh process
whose peak memory is the sampled RSS of its whole process tree (Spark: Python driver + JVM + any
workers). Reports medians, the ratio, a cross-check of the two outputs, and a linear extrapolation of
the Spark throughput to the 4.37B-row dataset on N cores.

    python benchmarks/preprocess.py [--rows 1000000] [--repeats 2] [--threshold 3]

Writes benchmarks/results/preprocess.json and benchmarks/results/preprocess.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.criteo_raw import write_raw_days  # noqa: E402

CRITEO_ROWS = 4_373_472_329
# Criteo-shaped: a few large vocabularies, many small ones (26 features).
VOCABULARY_SIZES = [300_000, 20_000, 10_000, 5_000, 10_000, 4, 5_000, 1_000, 60, 200_000, 100_000, 50_000, 11,
                    2_000, 8_000, 100, 4, 900, 15, 300_000, 150_000, 250_000, 30_000, 8_000, 90, 35]


def measure(cmd: list[str], env: dict, timeout: float) -> dict:
    """Run `cmd`; wall time and peak RSS summed over the process tree (sampled every 50 ms)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]
    done = threading.Event()

    def sample():
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                tree = [root] + root.children(recursive=True)
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree if p.is_running()))
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
    return {"seconds": seconds, "peak_rss_bytes": peak[0], "stdout": out}


def compare_outputs(spark_dir: Path, base_dir: Path) -> dict:
    """Cardinalities and row counts equal; test/validation (unshuffled) byte-identical."""
    from dlrm.data.feature_spec import FeatureSpec

    a, b = FeatureSpec.load(str(spark_dir)), FeatureSpec.load(str(base_dir))
    same_files = all((spark_dir / split / f).read_bytes() == (base_dir / split / f).read_bytes()
                     for split in ("test", "validation") for f in os.listdir(spark_dir / split))
    return {"cardinalities_equal": a.cardinalities == b.cardinalities,
            "rows_equal": a.metadata["num_rows"] == b.metadata["num_rows"],
            "eval_splits_byte_identical": same_files, "rows": a.metadata["num_rows"]}


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=2, help="alternating runs of each")
    p.add_argument("--threshold", type=int, default=3)
    p.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    p.add_argument("--driver_memory", default="6g")
    p.add_argument("--workdir", default="/tmp/dlrm_preprocess_bench")
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--timeout", type=float, default=1800)
    return p.parse_args()


def main() -> None:
    a = _parse_args()
    work = Path(a.workdir)
    raw = work / f"raw_{a.rows}"
    days = [0, 1, 2]
    per_day = [int(a.rows * 0.4), int(a.rows * 0.4), a.rows - 2 * int(a.rows * 0.4)]
    if not (raw / "day_2").exists():
        t = time.perf_counter()
        write_raw_days(raw, days, per_day, seed=1, malformed_per_day=40, vocabulary_sizes=VOCABULARY_SIZES)
        print(f"generated {a.rows} rows in {time.perf_counter() - t:.0f} s", flush=True)
    raw_bytes = sum(f.stat().st_size for f in raw.iterdir())

    env = dict(os.environ, PYTHONPATH=str(ROOT))  # start_session sets PYSPARK_PYTHON and SPARK_LOCAL_IP
    spark_cmd = [sys.executable, "-m", "preproc_spark3", str(raw), str(work / "out_spark"),
                 "--frequency_threshold", str(a.threshold), "--train_days", "0-1", "--eval_day", "2",
                 "--master", f"local[{a.cores}]", "--driver_memory", a.driver_memory,
                 "--shuffle_partitions", str(8 * a.cores), "--max_malformed_fraction", "0.01"]
    base_cmd = [sys.executable, str(ROOT / "benchmarks" / "preprocess_baseline.py"), str(raw),
                str(work / "out_base"), "--threshold", str(a.threshold), "--train_days", "0-1", "--eval_day", "2"]
    runs = {"spark": [], "baseline": []}
    for r in range(a.repeats):
        for name, cmd in (("spark", spark_cmd), ("baseline", base_cmd)):
            shutil.rmtree(work / f"out_{'spark' if name == 'spark' else 'base'}", ignore_errors=True)
            m = measure(cmd, env, a.timeout)
            entry = {"seconds": round(m["seconds"], 2), "peak_rss_gib": round(m["peak_rss_bytes"] / 2**30, 3)}
            if name == "spark":
                report = json.loads((work / "out_spark" / "preprocess_report.json").read_text())
                entry["stage_seconds"] = report["stage_seconds"]
            runs[name].append(entry)
            print(f"run {r} {name}: {entry}", flush=True)

    check = compare_outputs(work / "out_spark", work / "out_base")
    med = {k: statistics.median(e["seconds"] for e in v) for k, v in runs.items()}
    med_stages = statistics.median(sum(e["stage_seconds"].values()) for e in runs["spark"])
    peak = {k: max(e["peak_rss_gib"] for e in v) for k, v in runs.items()}
    rate = {k: a.rows / s for k, s in med.items()}
    per_core = a.rows / med_stages / a.cores  # JVM start excluded: it does not grow with the data
    extrapolation = {str(n): round(CRITEO_ROWS / (per_core * n) / 3600, 2) for n in (2, 16, 64, 128, 512)}
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "processor": _cpu_name()},
        "command": "python benchmarks/preprocess.py " + " ".join(sys.argv[1:]),
        "rows": a.rows, "raw_bytes": raw_bytes, "threshold": a.threshold, "spark_master": f"local[{a.cores}]",
        "runs": runs, "median_seconds": med, "rows_per_second": rate,
        "spark_over_baseline_speed": rate["spark"] / rate["baseline"],
        "spark_stage_seconds_median": med_stages, "spark_rows_per_second_per_core_excluding_jvm_start": per_core,
        "peak_rss_gib": peak, "outputs_agree": check,
        "extrapolated_hours_4_37B_rows_by_cores": extrapolation,
    }
    results = Path(a.results)
    results.mkdir(parents=True, exist_ok=True)
    (results / "preprocess.json").write_text(json.dumps(result, indent=2))
    (results / "preprocess.md").write_text(_table(result))
    print(_table(result))


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _table(r: dict) -> str:
    lines = [f"Preprocessing benchmark ({r['date']}, {r['machine']['cpus']} cores, {r['machine']['processor']}); "
             f"`{r['command']}`", "",
             f"{r['rows']:,} raw rows ({r['raw_bytes'] / 2**20:.0f} MiB), threshold {r['threshold']}, "
             f"median of {len(r['runs']['spark'])} alternating runs each; outputs agree: "
             f"{all(v for k, v in r['outputs_agree'].items() if k != 'rows')}", "",
             "| pipeline | median s | rows/s | peak RSS (process tree) |", "|---|---|---|---|"]
    for name, label in (("spark", f"Spark {r['spark_master']} (full job incl. JVM start)"),
                        ("baseline", "pyarrow/numpy, 1 process, in memory")):
        lines.append(f"| {label} | {r['median_seconds'][name]:.1f} | {r['rows_per_second'][name]:,.0f} | "
                     f"{r['peak_rss_gib'][name]:.2f} GiB |")
    lines += ["", f"Spark / baseline speed: **{r['spark_over_baseline_speed']:.2f}x**. Spark stages alone "
              f"(no JVM start): {r['spark_stage_seconds_median']:.1f} s = "
              f"{r['spark_rows_per_second_per_core_excluding_jvm_start']:,.0f} rows/s per core.", "",
              "Linear extrapolation of the Spark stages to 4.37B rows (assumes per-core throughput holds; the "
              "global sort and the large-dictionary joins scale worse, so read these as lower bounds):", "",
              "| cores | hours |", "|---|---|"]
    lines += [f"| {n} | {h} |" for n, h in r["extrapolated_hours_4_37B_rows_by_cores"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
