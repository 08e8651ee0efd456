"""Outbrain preprocessing benchmark: the Spark job vs its single-process pandas reference, same run.

For each click count, generates the raw Kaggle CSVs once (`dlrm.data.synthetic.outbrain_raw`: events,
ads, documents and aspect tables in the real data's proportions), then runs in alternation the whole Spark
job (`python -m preproc_spark3.outbrain`, local[N], JVM start included; local[1] too in the first
rounds) and the pandas reference (tests/support/outbrain_reference.py: features in memory, nothing
written), each in a fresh process whose peak memory is the sampled RSS of its whole process tree. Two click
counts show whether the job's peak memory follows its settings or the data.

    python -m benchmarks.outbrain_preprocess [--clicks 5000000 10000000] [--repeats 2]

Writes benchmarks/results/outbrain_preprocess.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from functools import partial
from pathlib import Path
from typing import Optional

from benchmarks.machine import (
    RESULTS,
    ROOT,
    alternate_windows,
    command_line,
    machine_facts,
    run_facts,
    utc_now,
    write_report,
)
from benchmarks.preprocess import measure

KAGGLE_CLICKS = 87_141_731  # clicks_train.csv rows
TARGET_CLICKS_PER_SECOND_PER_CORE = 18_000
REFERENCE = ("import sys; from tests.support.outbrain_reference import reference_outbrain; "
             "reference_outbrain(sys.argv[1])")


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clicks", type=int, nargs="+", default=[5_000_000, 10_000_000])
    p.add_argument("--repeats", type=int, default=2, help="alternating runs of each, per click count")
    p.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    p.add_argument("--one_core_rounds", type=int, default=1, help="rounds (of the first click count) with local[1]")
    p.add_argument("--driver_memory", default="4g")
    p.add_argument("--workdir", default="/tmp/dlrm_outbrain_bench")
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--timeout", type=float, default=3600)
    return p.parse_args(argv)


def raw_csvs(work: Path, clicks: int) -> Path:
    raw = work / f"raw_{clicks}"
    if not (raw / "outbrain_raw.json").exists():
        measure([sys.executable, "-m", "dlrm.data.synthetic.outbrain_raw", "--out", str(raw), "--clicks", str(clicks),
                 "--overwrite"], dict(os.environ, PYTHONPATH=ROOT), 3600)
    return raw


def commands(a: argparse.Namespace, raw: Path, work: Path) -> dict[str, list[str]]:
    def spark(cores: int) -> list[str]:
        return [sys.executable, "-m", "preproc_spark3.outbrain", str(raw), str(work / f"out_local{cores}"),
                "--master", f"local[{cores}]", "--driver_memory", a.driver_memory, "--overwrite"]

    return {"spark": spark(a.cores), "reference": [sys.executable, "-c", REFERENCE, str(raw)], "spark_local1": spark(1)}


def run_one(name: str, cmd: list[str], out: Optional[Path], timeout: float) -> dict:
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    m = measure(cmd, dict(os.environ, PYTHONPATH=ROOT), timeout)
    entry = {"seconds": round(m["seconds"], 2), "peak_rss_gib": round(m["peak_rss_bytes"] / 2**30, 3),
             "cpu_seconds": round(m["cpu_seconds"], 2), "load_average_1min": round(os.getloadavg()[0], 2)}
    report = out / "preprocess_report.json" if out is not None else None
    if report is not None and report.exists():
        entry["stage_seconds"] = json.loads(report.read_text()).get("stage_seconds", {})
    return entry


def measure_size(a: argparse.Namespace, clicks: int, work: Path, with_one_core: bool) -> dict:
    raw = raw_csvs(work, clicks)
    outs = {"spark": work / f"out_local{a.cores}", "reference": None, "spark_local1": work / "out_local1"}
    runs = {name: partial(run_one, name, cmd, outs[name], a.timeout) for name, cmd in commands(a, raw, work).items()}
    one_core_rounds = min(a.one_core_rounds, a.repeats) if with_one_core else 0
    first = alternate_windows(runs, one_core_rounds)
    rest = alternate_windows({k: v for k, v in runs.items() if k != "spark_local1"}, a.repeats - one_core_rounds)
    entries = {name: [w.value for w in first.get(name, []) + rest.get(name, [])] for name in runs}
    entries = {name: values for name, values in entries.items() if values}
    seconds = {name: statistics.median(e["seconds"] for e in values) for name, values in entries.items()}
    summary = {"clicks": clicks, "raw_bytes": sum(f.stat().st_size for f in raw.iterdir()), "runs": entries,
               "median_seconds": seconds,
               "peak_rss_gib": {name: max(e["peak_rss_gib"] for e in values) for name, values in entries.items()},
               "clicks_per_second": {name: clicks / s for name, s in seconds.items()},
               "clicks_per_second_per_core": clicks / seconds["spark"] / a.cores,
               "spark_over_reference_speed": seconds["reference"] / seconds["spark"]}
    stages = [e["stage_seconds"] for e in entries["spark"] if e.get("stage_seconds")]
    if stages:
        summary["spark_stage_seconds_medians"] = {k: statistics.median(s[k] for s in stages) for k in stages[0]}
    if "spark_local1" in seconds:
        summary["local1_over_localN_seconds"] = seconds["spark_local1"] / seconds["spark"]
    return summary


def main(argv: Optional[list[str]] = None) -> None:
    a = parse_args(argv)
    work = Path(a.workdir)
    sizes = [measure_size(a, clicks, work, with_one_core=(i == 0)) for i, clicks in enumerate(a.clicks)]
    largest = max(sizes, key=lambda s: s["clicks"])
    rate = largest["clicks_per_second_per_core"]
    result = {"date": utc_now(), "command": command_line("benchmarks.outbrain_preprocess", argv),
              "machine": machine_facts(), "spark_master": f"local[{a.cores}]", "sizes": sizes,
              "target_clicks_per_second_per_core": TARGET_CLICKS_PER_SECOND_PER_CORE,
              "extrapolated_minutes_kaggle_by_cores": {str(n): round(KAGGLE_CLICKS / (rate * n) / 60, 1)
                                                       for n in (2, 16, 64)}}
    write_report(str(Path(a.results) / "outbrain_preprocess.json"), result, _table(result), indent=2)


def _table(r: dict) -> list[str]:
    lines = [f"Outbrain preprocessing benchmark ({run_facts(r['date'], r['machine'])}); `{r['command']}`", "",
             "Whole runs (Spark: JVM start included; the reference computes the features in memory and writes "
             "nothing), median of alternating runs; peak RSS of each process tree.", "",
             "| clicks | raw MiB | pipeline | median s | clicks/s | clicks/s per core | peak RSS GiB |",
             "|---:|---:|---|---:|---:|---:|---:|"]
    for s in r["sizes"]:
        for name, label in (("spark", f"Spark {r['spark_master']}"), ("spark_local1", "Spark local[1]"),
                            ("reference", "pandas reference, 1 process")):
            if name in s["median_seconds"]:
                cores = 1 if name != "spark" else int(r["spark_master"][6:-1])
                rate = s["clicks_per_second"][name]
                lines.append(f"| {s['clicks']:,} | {s['raw_bytes'] / 2**20:.0f} | {label} | "
                             f"{s['median_seconds'][name]:.1f} | {rate:,.0f} | {rate / cores:,.0f} | "
                             f"{s['peak_rss_gib'][name]:.2f} |")
    lines.append("")
    for s in r["sizes"]:
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in s.get("spark_stage_seconds_medians", {}).items())
        scaling = s.get("local1_over_localN_seconds")
        lines.append(f"- {s['clicks']:,} clicks: Spark / reference speed **{s['spark_over_reference_speed']:.2f}x**"
                     + (f"; local[1] / local[N] time {scaling:.2f}x" if scaling else "")
                     + (f"; stages: {stages}" if stages else "") + ".")
    minutes = ", ".join(f"{n} cores {m} min" for n, m in r["extrapolated_minutes_kaggle_by_cores"].items())
    lines += ["", f"Target: {r['target_clicks_per_second_per_core']:,} clicks/s per core. Kaggle's 87.1M clicks at "
              f"the largest size's per-core rate, assuming it holds per core: {minutes}."]
    return lines


if __name__ == "__main__":
    main()
