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

    python -m benchmarks.data_check [--preset t15] [--rows 16777216] [--windows 3] [--window_seconds 5]

Writes benchmarks/results/data_check.json and benchmarks/results/data_check.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from functools import partial
from typing import Callable, Optional

from benchmarks import machine
from benchmarks.loader import ensure_dataset, mapping_files, raw_read_window
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.mapped_files import MappedFiles
from dlrm.data.reader.validate import check_mappings

REFERENCE = "raw_1_stream"


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=None, help="dataset directory (default: data/bench_check_<preset>)")
    parser.add_argument("--preset", default="t15")
    parser.add_argument("--rows", type=int, default=1 << 24)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window_seconds", type=float, default=5.0)
    parser.add_argument("--out", default=machine.RESULTS)
    return parser.parse_args(argv)


def variants(directory: str, spec: FeatureSpec, paths: list[str]) -> dict[str, Callable[[], object]]:
    """Name -> one whole pass over the train mapping (the raw read first: the ratios' reference)."""
    kept = MappedFiles(spec, "train")

    def check(threads: int) -> None:
        check_mappings(FeatureSpec.load(directory), ["train"], threads=threads)

    def raw(streams: int) -> None:
        raw_read_window(paths, 0.0, streams)  # one whole pass

    return {
        REFERENCE: lambda: raw(1),
        "raw_2_streams": lambda: raw(2),
        "check_1_thread": lambda: check(1),
        "check_2_threads": lambda: check(2),
        "check_2_threads_mappings_kept": lambda: kept.check_rows(0, kept.num_rows, 2),
    }


def measure(runs: dict[str, Callable[[], object]], windows: int, window_seconds: float
            ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """After a warm-up pass of each (page cache, numba compilation), alternating windows of whole
    passes; returns per variant the seconds per pass and the load average of each window."""
    for run in runs.values():
        run()
    timed = machine.alternate_windows(
        {name: partial(machine.repeat_for, window_seconds, run) for name, run in runs.items()}, windows)
    seconds_per_pass = {name: [w.value[1] / w.value[0] for w in ws] for name, ws in timed.items()}
    load = {name: [w.load_average for w in ws] for name, ws in timed.items()}
    return seconds_per_pass, load


def report(args: argparse.Namespace, argv: Optional[list[str]], file_bytes: int,
           seconds_per_pass: dict[str, list[float]], load: dict[str, list[float]]) -> dict:
    """The JSON report: per-window figures, their medians, and speed ratios to the raw read."""
    median = machine.medians(seconds_per_pass)
    speed_ratios = {name: machine.ratios(seconds_per_pass[REFERENCE], v) for name, v in seconds_per_pass.items()}
    return {
        "date": machine.utc_now(),
        "command": machine.command_line("benchmarks.data_check", argv),
        "machine": machine.machine_facts(),
        "dataset": {"preset": args.preset, "rows": args.rows, "record_bytes": file_bytes // args.rows,
                    "file_bytes": file_bytes},
        "windows": args.windows, "window_seconds": args.window_seconds,
        "seconds_per_pass": seconds_per_pass, "median_seconds_per_pass": median,
        "median_gb_per_second": {name: file_bytes / s / 1e9 for name, s in median.items()},
        "median_rows_per_second": {name: args.rows / s for name, s in median.items()},
        "speed_ratio_to_raw_1_stream_per_window": speed_ratios,
        "median_speed_ratio_to_raw_1_stream": machine.medians(speed_ratios),
        "load_average_1min_per_window": load,
    }


def table(result: dict) -> list[str]:
    """The markdown table of `report`'s result, one row per variant."""
    data = result["dataset"]
    rows, file_bytes = data["rows"], data["file_bytes"]
    lines = [f"Data check benchmark ({machine.run_facts(result['date'], result['machine'])}; preset {data['preset']}, "
             f"{rows:,} rows x {file_bytes // rows} B = {file_bytes / 1e9:.2f} GB, page cache warm; "
             f"median of {result['windows']} alternating {result['window_seconds']:g}-s windows)",
             "", "| variant | seconds per pass | GB/s | rows/s | speed ratio to raw 1 stream | "
             "per-window ratios | load avg (1 min) per window |", "|---|---:|---:|---:|---:|---|---|"]
    for name, seconds in result["median_seconds_per_pass"].items():
        per_window = result["speed_ratio_to_raw_1_stream_per_window"][name]
        load = result["load_average_1min_per_window"][name]
        lines.append(f"| {name.replace('_', ' ')} | {seconds:.3f} | {file_bytes / seconds / 1e9:.2f} | "
                     f"{rows / seconds / 1e6:,.0f} M | {result['median_speed_ratio_to_raw_1_stream'][name]:.2f} | "
                     f"{', '.join(f'{r:.2f}' for r in per_window)} | {', '.join(f'{v:.1f}' for v in load)} |")
    return lines + ["", f"Command: `{result['command'].strip()}`"]


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    directory = args.data or os.path.join(machine.ROOT, "data", f"bench_check_{args.preset}")
    spec = ensure_dataset(directory, args.preset, args.rows)
    paths = mapping_files(spec, "train")
    file_bytes = sum(os.path.getsize(p) for p in paths)
    seconds_per_pass, load = measure(variants(directory, spec, paths), args.windows, args.window_seconds)
    result = report(args, argv, file_bytes, seconds_per_pass, load)
    machine.write_report(os.path.join(args.out, "data_check.json"), result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
