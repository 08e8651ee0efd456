"""Loader benchmark: BatchReader throughput vs a raw sequential read of the same files (page cache warm).

Variants, all over the same split-binary mapping:
- raw 1 stream / raw 2 streams: every file front to back with `os.preadv` into a reused 8 MiB buffer
  (the fastest plain read; no conversion), by one thread, and by two threads taking every other
  8 MiB chunk. "raw 1 stream" is the ratio's reference.
- reader 1 thread / reader 2 threads: `BatchReader(prefetch=4, threads=k)` (k=1 is the trainer's
  default): k background threads each decode whole batches (float32 numerical, int32 categorical,
  float32 label), at most 4 + k ahead of the consumer, while it counts rows; one reader
  iterates epoch after epoch, as the trainer uses it.
- reader 2 threads inline: `prefetch=0`, each batch decoded when asked for, its rows split over
  the consumer's thread and one of numba's: two output sets alternate and stay in the cache.
- reader 2 threads fresh mappings: a new reader every epoch, so every page of the mapped files is
  faulted in again (what a run's first epoch pays: ~0.2 us per 4 KiB page on this VM).
- floor 2 threads: a lower bound on any loader's work: per batch, one parallel region reads every
  column and writes it zero-extended to 4 bytes per value (the size of the reader's outputs); no
  float16 conversion, no [B, 26] transpose, no checks, one output set reused (cache-resident).
  "8 output sets" rotates over as many sets as the 2-thread reader keeps at prefetch 4.
Windows alternate (raw 1 stream, raw 2 streams, reader ..., floor ..., raw ...) after a warm-up;
the report gives medians and per-window ratios to the raw read of the same round, and the load
average at each window (the machine is shared). Bandwidth counts the bytes of the files consumed
(rows x record bytes), so raw and reader are directly comparable.

    python -m benchmarks.loader [--rows 4194304] [--batch 65536] [--windows 3] [--window_seconds 10]

Writes benchmarks/results/loader.json and benchmarks/results/loader.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numba
import numpy as np

from benchmarks import machine
from dlrm.config import DataConfig
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.batch import pooled_output_sets
from dlrm.data.reader.decode import part_bounds
from dlrm.data.reader.reader import BatchReader
from dlrm.data.synthetic.criteo import preset_cardinalities
from dlrm.data.synthetic.generator import generate_atomically, is_generated

RAW_BUFFER_BYTES = 8 << 20
READER_PREFETCH = DataConfig().prefetch_batches  # the trainer's default
READER_SETS = pooled_output_sets(READER_PREFETCH, 2)  # output sets the 2-thread reader keeps


def ensure_dataset(directory: str, preset: str, rows: int) -> FeatureSpec:
    sizes = (preset_cardinalities(preset), rows, 0, 1)  # cardinalities, train rows, no test rows, seed
    if not is_generated(directory, *sizes):
        generate_atomically(directory, *sizes, preset=preset)
    return FeatureSpec.load(directory)


def mapping_files(spec: FeatureSpec, mapping: str) -> list[str]:
    return [chunk.path for chunk in spec.binary_chunks(mapping)]


def read_share(paths: list[str], view: memoryview, stream: int, streams: int) -> int:
    """Read chunks stream, stream + streams, ... (of the buffer's size) of every file; returns bytes."""
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            offset = stream * len(view)
            while True:
                got = os.preadv(fd, [view], offset)
                if got == 0:
                    break
                total += got
                offset += streams * len(view)
        finally:
            os.close(fd)
    return total


def raw_read_window(paths: list[str], seconds: float, streams: int = 1) -> tuple[float, float]:
    """Whole sequential passes over every file until `seconds` pass; returns (bytes, seconds).

    With `streams` > 1, that many threads share each pass (os.preadv releases the GIL)."""
    views = [memoryview(bytearray(RAW_BUFFER_BYTES)) for _ in range(streams)]
    total, started = 0, time.perf_counter()
    while True:
        if streams == 1:
            total += read_share(paths, views[0], 0, 1)
        else:
            got = [0] * streams

            def run(k: int) -> None:
                got[k] = read_share(paths, views[k], k, streams)

            workers = [threading.Thread(target=run, args=(k,)) for k in range(streams)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            total += sum(got)
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return total, elapsed


def reader_window(spec: FeatureSpec, batch: int, threads: int, seconds: float, prefetch: int = READER_PREFETCH,
                  fresh_mappings: bool = False) -> tuple[float, float]:
    """Full epochs of BatchReader until `seconds` pass; returns (file bytes, seconds).

    One reader iterates epoch after epoch, as the trainer uses it, so its file mappings stay set
    up. With `fresh_mappings`, every epoch opens a new reader: each first touch of a mapped page
    then costs a page fault (what the first epoch of a run pays)."""
    record = sum(chunk.record_bytes for chunk in spec.binary_chunks("train"))
    reader = BatchReader(spec, "train", batch, prefetch=prefetch, threads=threads)
    rows, started = 0, time.perf_counter()
    while True:
        if fresh_mappings:
            reader = BatchReader(spec, "train", batch, prefetch=prefetch, threads=threads)
        for b in reader:
            rows += b.label.shape[0]
            b.release()  # as the trainer does after its step
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return rows * record, elapsed


@numba.njit(nogil=True, cache=True)
def _widen_copy(source, out):
    for i in range(out.shape[0]):
        out[i] = source[i]


@numba.njit(nogil=True, cache=True)
def _widen_rows(columns, per_row, outputs, first_row, lo, hi):
    """Rows lo..hi: outputs[k] = columns[k] from row first_row on, zero-extended to uint32 (per_row[k]
    values per row)."""
    for k in range(per_row.shape[0]):
        width = per_row[k]
        _widen_copy(columns[k][(first_row + lo) * width:(first_row + hi) * width], outputs[k][lo * width:hi * width])


@numba.njit(parallel=True, nogil=True, cache=True)
def _widen_batch(group8, per_row8, out8, group16, per_row16, out16, group32, per_row32, out32, first_row, rows,
                 parts):
    """One batch, every column: `parts` row ranges in one parallel region (as the reader decodes);
    columns grouped by stored width (a numba tuple holds one array type)."""
    for p in numba.prange(parts):
        lo, hi = part_bounds(rows, parts, p)  # the reader's split
        _widen_rows(group8, per_row8, out8, first_row, lo, hi)
        _widen_rows(group16, per_row16, out16, first_row, lo, hi)
        _widen_rows(group32, per_row32, out32, first_row, lo, hi)


def floor_window(spec: FeatureSpec, batch: int, seconds: float, threads: int = 2,
                 output_sets: int = 1) -> tuple[float, float]:
    """A lower bound on any loader's cost: per batch, read every column's mapped bytes and write them
    zero-extended to 4 bytes per value (what the reader's float32/int32 outputs take), with `threads`
    numba threads in one parallel region; no float16 conversion, no [B, 26] transpose, no checks.
    Batches take turns over `output_sets` sets of outputs: 1 stays in the cache; the reader at
    prefetch 4 and 2 threads keeps up to 8 (10.5 MB each), which do not. Returns (bytes, seconds)."""
    numba.set_num_threads(threads)
    chunks = spec.binary_chunks("train")
    rows = spec.num_rows("train")
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32}
    groups = {width: ([], []) for width in unsigned}  # stored width -> columns, values per row
    for chunk in chunks:
        columns, per_row = groups[chunk.dtype.itemsize]
        columns.append(np.memmap(chunk.path, unsigned[chunk.dtype.itemsize], "r"))
        per_row.append(len(chunk.features))
    sets = []  # per output set: the kernel's arguments
    for _ in range(output_sets):
        args = []
        for width, (columns, per_row) in groups.items():
            outputs = [np.empty(batch * values, np.uint32) for values in per_row]
            if not columns:  # an unused dummy keeps the kernel's signature
                columns, outputs = [np.zeros(0, unsigned[width])], [np.zeros(0, np.uint32)]
            args += [tuple(columns), np.asarray(per_row, np.int64), tuple(outputs)]
        sets.append(args)
    total, started = 0, time.perf_counter()
    while True:
        for begin in range(0, rows - batch + 1, batch):
            _widen_batch(*sets[(begin // batch) % output_sets], begin, batch, threads)
            total += batch
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return total * sum(c.record_bytes for c in chunks), elapsed


def parse_args(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=os.path.join(machine.ROOT, "data", "bench_loader"))
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--rows", type=int, default=4 << 20)
    parser.add_argument("--batch", type=int, default=65536)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window_seconds", type=float, default=10.0)
    parser.add_argument("--out", default=machine.RESULTS)
    return parser.parse_args(argv)


def variants(spec: FeatureSpec, paths: list, batch: int, window: float) -> dict:
    """name -> one timed window of that variant, returning (bytes consumed, seconds)."""
    return {
        "raw_1_stream": lambda: raw_read_window(paths, window, 1),
        "raw_2_streams": lambda: raw_read_window(paths, window, 2),
        "reader_1_thread": lambda: reader_window(spec, batch, 1, window),
        "reader_2_threads": lambda: reader_window(spec, batch, 2, window),
        "reader_2_threads_inline": lambda: reader_window(spec, batch, 2, window, prefetch=0),
        "reader_2_threads_fresh_mappings": lambda: reader_window(spec, batch, 2, window, fresh_mappings=True),
        "floor_2_threads": lambda: floor_window(spec, batch, window),
        f"floor_2_threads_{READER_SETS}_output_sets": lambda: floor_window(spec, batch, window,
                                                                          output_sets=READER_SETS),
    }


def warm_up(spec: FeatureSpec, paths: list, batch: int) -> None:
    """Page cache, numba compilation, allocator."""
    raw_read_window(paths, 0.0)
    reader_window(spec, batch, 1, 0.0)
    reader_window(spec, batch, 2, 0.0)
    floor_window(spec, batch, 0.0)


def measure(runs: dict, windows: int, batch_bytes: int) -> tuple:
    """Alternating windows: (bytes/s, load average, CPU ms per batch's worth of bytes), each name -> list."""
    timed = machine.alternate_windows(runs, windows)
    speed = {name: [w.value[0] / w.value[1] for w in ws] for name, ws in timed.items()}
    load = {name: [w.load_average for w in ws] for name, ws in timed.items()}
    cpu_ms = {name: [w.cpu_seconds * 1e3 * batch_bytes / w.value[0] for w in ws] for name, ws in timed.items()}
    return speed, load, cpu_ms


def report(args: argparse.Namespace, argv, record: int, file_bytes: int, speed: dict, load: dict,
           cpu_ms: dict) -> dict:
    median = machine.medians(speed)
    readers = [name for name in speed if name.startswith(("reader", "floor"))]
    best_raw = [max(a, b) for a, b in zip(speed["raw_1_stream"], speed["raw_2_streams"])]
    to_raw = {name: machine.ratios(speed[name], speed["raw_1_stream"]) for name in readers}
    to_best = {name: machine.ratios(speed[name], best_raw) for name in readers}
    return {
        "date": machine.utc_now(),
        "command": machine.command_line("benchmarks.loader", argv),
        "machine": machine.machine_facts(),
        "dataset": {"preset": args.preset, "rows": args.rows, "record_bytes": record, "file_bytes": file_bytes},
        "global_batch": args.batch, "windows": args.windows, "window_seconds": args.window_seconds,
        "bytes_per_second": speed, "median_bytes_per_second": median,
        "median_samples_per_second": {name: v / record for name, v in median.items()},
        "load_average_1min_per_window": load,
        "cpu_ms_per_batch_per_window": cpu_ms,
        "median_cpu_ms_per_batch": machine.medians(cpu_ms),
        "ratio_to_raw_1_stream_per_window": to_raw,
        "median_ratio_to_raw_1_stream": machine.medians(to_raw),
        "ratio_to_best_raw_per_window": to_best,
        "median_ratio_to_best_raw": machine.medians(to_best),
        "target_ratio": 0.70,
    }


def table(result: dict) -> list:
    """The markdown report of `result`."""
    args, record = result["dataset"], result["dataset"]["record_bytes"]
    median, to_raw = result["median_bytes_per_second"], result["ratio_to_raw_1_stream_per_window"]
    lines = [f"Loader benchmark ({result['date']}, {result['machine'].get('cpu', '?')}, "
             f"{result['machine']['cpus']} cores; preset {args['preset']}, {args['rows']:,} rows x {record} B, "
             f"global batch {result['global_batch']:,}; median of {result['windows']} alternating "
             f"{result['window_seconds']:g}-s windows)",
             "", "| variant | MB/s | samples/s | ratio to raw 1 stream | ratio to best raw | CPU ms per batch | "
             "load avg (1 min) per window |", "|---|---:|---:|---:|---:|---:|---|"]
    for name in median:
        if name in to_raw:
            ratio = f"{result['median_ratio_to_raw_1_stream'][name]:.2f}"
            best = f"{result['median_ratio_to_best_raw'][name]:.2f}"
        else:
            ratio, best = ("1.00" if name == "raw_1_stream" else "-"), "-"
        loads = ", ".join(f"{v:.1f}" for v in result["load_average_1min_per_window"][name])
        lines.append(f"| {name.replace('_', ' ')} | {median[name] / 1e6:,.0f} | {median[name] / record:,.0f} | "
                     f"{ratio} | {best} | {result['median_cpu_ms_per_batch'][name]:.2f} | {loads} |")
    for name, per_window in to_raw.items():
        lines.append("")
        lines.append(f"Per-window ratios, {name.replace('_', ' ')} / raw 1 stream: "
                     + ", ".join(f"{r:.2f}" for r in per_window))
    return lines + ["", f"Command: `{result['command'].strip()}`"]


def main(argv=None) -> int:
    args = parse_args(argv)
    spec = ensure_dataset(args.data, args.preset, args.rows)
    paths = mapping_files(spec, "train")
    file_bytes = sum(os.path.getsize(p) for p in paths)
    record = file_bytes // args.rows
    runs = variants(spec, paths, args.batch, args.window_seconds)
    warm_up(spec, paths, args.batch)
    speed, load, cpu_ms = measure(runs, args.windows, args.batch * record)
    result = report(args, argv, record, file_bytes, speed, load, cpu_ms)
    machine.write_report(os.path.join(args.out, "loader.json"), result, table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
