"""Checkpoint CRC32 benchmark: what the manifest's checksums cost when a checkpoint is written, and what
verifying one costs before it is read, on one large embedding piece (page cache warm).

Variants, alternating windows, each a whole pass over one float32 array of `--mib` MiB:
- write np.save: `np.save` of the array to a file and an fsync (the reference for writing);
- write checkpoint: the checkpoint writer (`files.save_array`: header and data through the CRC32
  counter, then an fsync), as every save writes each piece;
- read raw: the file read front to back into 8 MiB buffers (the reference for reading);
- verify: `verify.check_file` (size, CRC32 of every byte, every float finite), as every restore,
  evaluation and export does for each file before reading it.
The report gives medians (GB/s), ratios to the reference, and the time one process needs for the Criteo
t15 DLRM checkpoint (its tables x dim 128 x float32, SGD: no optimizer slot), which N ranks share.

    python -m benchmarks.checkpoint_verify [--mib 512] [--windows 3]

Writes benchmarks/results/checkpoint_verify.json and benchmarks/results/checkpoint_verify.md.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from typing import Optional

import numpy as np

from benchmarks import machine
from dlrm.data.synthetic.criteo import T15
from dlrm.train.checkpoint.files import save_array
from dlrm.train.checkpoint.verify import check_file

T15_BYTES = sum(T15) * 128 * 4
READ_BYTES = 8 << 20


def _np_save(path: str, array: np.ndarray) -> None:
    np.save(path, array)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_raw(path: str) -> None:
    buffer = bytearray(READ_BYTES)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def main(argv: Optional[list[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--out", default=machine.RESULTS)
    args = parser.parse_args(argv)
    array = np.random.default_rng(0).standard_normal(args.mib << 18, dtype=np.float32).reshape(-1, 128)
    work = tempfile.mkdtemp(prefix="checkpoint_verify_")
    piece, reference = os.path.join(work, "piece.npy"), os.path.join(work, "np_save.npy")
    try:
        entry = save_array(piece, array)
        runs = {"write np.save": lambda: _np_save(reference, array),
                "write checkpoint": lambda: save_array(piece, array),
                "read raw": lambda: _read_raw(piece),
                "verify": lambda: check_file(work, "piece.npy", entry)}
        windows = machine.alternate_windows(runs, args.windows, rotate=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = machine.medians({name: [w.wall_seconds for w in ws] for name, ws in windows.items()})
    facts = machine.machine_facts()
    references = {"write np.save": "write np.save", "write checkpoint": "write np.save", "read raw": "read raw",
                  "verify": "read raw"}
    result = {"date": machine.utc_now(), "machine": facts, "bytes": int(array.nbytes), "t15_bytes": T15_BYTES,
              "seconds": seconds, "load_average": {n: [w.load_average for w in ws] for n, ws in windows.items()},
              "ratio_to_reference": {n: speed_ratio(windows, n, references[n]) for n in runs}}
    table = [f"Checkpoint CRC32 benchmark ({machine.run_facts(result['date'], facts)}; one {args.mib} MiB float32 "
             f"piece, page cache warm; median of {args.windows} alternating windows)", "",
             "| variant | GB/s | speed ratio to its reference | one process, t15 DLRM checkpoint "
             f"({T15_BYTES / 1e9:.1f} GB) | load avg (1 min) per window |", "|---|---:|---:|---:|---|"]
    for name in runs:
        rate = array.nbytes / seconds[name]
        table.append(f"| {name} | {rate / 1e9:.2f} | {result['ratio_to_reference'][name]:.2f} (vs {references[name]}) "
                     f"| {T15_BYTES / rate:.0f} s | {', '.join(f'{x:.1f}' for x in result['load_average'][name])} |")
    table += ["", f"Command: `{machine.command_line('benchmarks.checkpoint_verify', argv)}`"]
    machine.write_report(os.path.join(args.out, "checkpoint_verify.json"), result, table)
    return result


def speed_ratio(windows: dict, name: str, reference: str) -> float:
    """The median over rounds of reference seconds / this variant's seconds (speed ratio, same round)."""
    return statistics.median(machine.ratios([w.wall_seconds for w in windows[reference]],
                                            [w.wall_seconds for w in windows[name]]))


if __name__ == "__main__":
    main()
