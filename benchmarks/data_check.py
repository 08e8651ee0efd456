"""Start-up data check benchmark: the value check every run does before step 1, vs a raw read of the
same files (page cache warm), on a t15-shaped dataset.

The dataset is `loader.py`'s (`ensure_dataset`: the synthetic generator, train mapping only) with the
Criteo t15 cardinalities by default: 26 tables, 89 bytes per row (ids stored as int8/int16/int32).
Variants, each a whole pass over the mapping, repeated until the window ends:
- raw 1 stream / raw 2 streams: `loader.py`'s plain read (every file front to back with `os.preadv`
  into a reused 8 MiB buffer, by one thread or two); "raw 1 stream" is the ratios' reference.
- check k threads: `check_mappings(spec, ["train"], threads=k)` as the trainer calls it on one rank:
  spec and files validated, the files mapped afresh (each page faulted in), every label, numerical
  and id checked by the compiled kernel (`decode.check_rows`) on k threads.
- check 2 threads, mappings kept: `MappedFiles.check_rows` on mappings set up once (no page faults):
  the kernel alone.
Windows alternate over the variants after a warm-up; the report gives medians (seconds per pass,
GB/s of file bytes, ratio to the raw read of the same round) and the load average at each window.

    python benchmarks/data_check.py [--preset t15] [--rows 16777216] [--windows 3] [--window_seconds 5]

Writes benchmarks/results/data_check.json and benchmarks/results/data_check.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.loader import ensure_dataset, machine, mapping_files, raw_read_window  # noqa: E402
from benchmarks.machine import write_table  # noqa: E402
from dlrm.data.binary import MappedFiles  # noqa: E402
from dlrm.data.feature_spec import FeatureSpec  # noqa: E402
from dlrm.data.validate import check_mappings  # noqa: E402


def passes(one_pass, seconds: float) -> tuple[int, float]:
    """Run `one_pass()` until `seconds` pass (at least once); returns (passes, seconds)."""
    count, started = 0, time.perf_counter()
    while True:
        one_pass()
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return count, elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="dataset directory (default: data/bench_check_<preset>)")
    parser.add_argument("--preset", default="t15")
    parser.add_argument("--rows", type=int, default=1 << 24)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window_seconds", type=float, default=5.0)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)

    directory = args.data or os.path.join(ROOT, "data", f"bench_check_{args.preset}")
    spec = ensure_dataset(directory, args.preset, args.rows)
    paths = mapping_files(spec, "train")
    file_bytes = sum(os.path.getsize(p) for p in paths)
    kept = MappedFiles(spec, "train")

    def check(threads: int) -> None:
        check_mappings(FeatureSpec.load(directory), ["train"], threads=threads)

    def raw(streams: int) -> None:
        raw_read_window(paths, 0.0, streams)  # one whole pass

    runs = {
        "raw_1_stream": lambda: raw(1),
        "raw_2_streams": lambda: raw(2),
        "check_1_thread": lambda: check(1),
        "check_2_threads": lambda: check(2),
        "check_2_threads_mappings_kept": lambda: kept.check_rows(0, kept.num_rows, 2),
    }
    for run in runs.values():  # warm-up: page cache, numba compilation
        run()
    seconds_per_pass = {name: [] for name in runs}
    load = {name: [] for name in runs}
    for _ in range(args.windows):
        for name, run in runs.items():
            load[name].append(os.getloadavg()[0])
            count, elapsed = passes(run, args.window_seconds)
            seconds_per_pass[name].append(elapsed / count)
    median = {name: statistics.median(v) for name, v in seconds_per_pass.items()}
    ratios = {name: [raw_s / s for raw_s, s in zip(seconds_per_pass["raw_1_stream"], v)]
              for name, v in seconds_per_pass.items()}
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/data_check.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "dataset": {"preset": args.preset, "rows": args.rows, "record_bytes": file_bytes // args.rows,
                    "file_bytes": file_bytes},
        "windows": args.windows, "window_seconds": args.window_seconds,
        "seconds_per_pass": seconds_per_pass, "median_seconds_per_pass": median,
        "median_gb_per_second": {name: file_bytes / s / 1e9 for name, s in median.items()},
        "median_rows_per_second": {name: args.rows / s for name, s in median.items()},
        "speed_ratio_to_raw_1_stream_per_window": ratios,
        "median_speed_ratio_to_raw_1_stream": {name: statistics.median(r) for name, r in ratios.items()},
        "load_average_1min_per_window": load,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "data_check.json"), "w") as f:
        json.dump(result, f, indent=1)
    table = [f"Data check benchmark ({result['date']}, {result['machine'].get('cpu', '?')}, "
             f"{result['machine']['cpus']} cores, flags {' '.join(result['machine']['flags'])}; preset {args.preset}, "
             f"{args.rows:,} rows x {file_bytes // args.rows} B = {file_bytes / 1e9:.2f} GB, page cache warm; "
             f"median of {args.windows} alternating {args.window_seconds:g}-s windows)",
             "", "| variant | seconds per pass | GB/s | rows/s | speed ratio to raw 1 stream | "
             "per-window ratios | load avg (1 min) per window |", "|---|---:|---:|---:|---:|---|---|"]
    for name in runs:
        table.append(f"| {name.replace('_', ' ')} | {median[name]:.3f} | {file_bytes / median[name] / 1e9:.2f} | "
                     f"{args.rows / median[name] / 1e6:,.0f} M | "
                     f"{result['median_speed_ratio_to_raw_1_stream'][name]:.2f} | "
                     f"{', '.join(f'{r:.2f}' for r in ratios[name])} | {', '.join(f'{v:.1f}' for v in load[name])} |")
    table += ["", f"Command: `{result['command'].strip()}`"]
    write_table(os.path.join(args.out, "data_check.md"), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
