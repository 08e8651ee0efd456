"""What every benchmark shares: the machine it ran on (the CPU model and the instruction-set flags its
figures depend on: AVX-512 and AVX512-BF16 set the GEMM ceilings, F16C the loader's float16 path),
alternating timed windows so machine noise hits every variant alike, medians and per-window ratios
over them, and the report files (JSON, markdown table, the header line with date, CPU and flags)."""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Generic, Mapping, Optional, Sequence, TypeVar

from dlrm import cpu_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: data/ and benchmarks/results/
RESULTS = os.path.join(ROOT, "benchmarks", "results")

FLAGS_THAT_MATTER = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma", "f16c", "bf16")

T = TypeVar("T")


def cpu_model() -> str:
    return cpu_info.cpu_model()


def cpu_flags() -> list[str]:
    """The flags among FLAGS_THAT_MATTER this CPU has, sorted."""
    return sorted(set(FLAGS_THAT_MATTER) & cpu_info.cpu_flags())


def native_bf16() -> bool:
    """Whether this CPU has bfloat16 instructions (else `--amp`'s bfloat16 is emulated, slower than fp32)."""
    return cpu_info.native_bf16(cpu_info.cpu_flags())


def machine_facts() -> dict:
    """The machine a report's figures come from: cores, Python version, CPU model, CPU flags."""
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "cpu": cpu_model(), "flags": cpu_flags()}


def run_facts(date: str, facts: dict) -> str:
    """The part of a report's header line that says when and on what: date, CPU model, cores, flags
    (`facts` as `machine_facts()` returns them)."""
    return f"{date}, {facts.get('cpu', '?')}, {facts['cpus']} cores, flags {' '.join(facts['flags'])}"


def utc_now(minutes: bool = False) -> str:
    """The report's date: ISO 8601 to the second, or "YYYY-MM-DD HH:MM UTC" with `minutes`."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%d %H:%M UTC") if minutes else now.isoformat(timespec="seconds")


def command_line(module: str, argv: Optional[Sequence[str]]) -> str:
    """How to repeat the run: `python -m <module> <arguments>` (`argv` None: this process's arguments)."""
    return " ".join(["python", "-m", module, *(argv if argv is not None else sys.argv[1:])])


@dataclass
class Window(Generic[T]):
    """One timed call of a variant: what it returned, wall and process-CPU seconds, and the 1-minute
    load average when it started (the machine is shared)."""

    value: T
    wall_seconds: float
    cpu_seconds: float
    load_average: float


def timed_window(run: Callable[[], T]) -> Window[T]:
    load = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    value = run()
    return Window(value, time.perf_counter() - started, time.process_time() - cpu_started, load)


def alternate_windows(runs: Mapping[str, Callable[[], T]], rounds: int, rotate: bool = False,
                      after_round: Optional[Callable[[int, dict[str, list[Window[T]]]], None]] = None
                      ) -> dict[str, list[Window[T]]]:
    """Each round times every variant once, in turn, so a slow spell of the machine hits all of them
    alike; with `rotate`, round k starts at the k-th variant so none always runs first.
    `after_round(k, windows so far)` runs after each round (progress lines)."""
    names = list(runs)
    windows: dict[str, list[Window[T]]] = {name: [] for name in names}
    for round_index in range(rounds):
        first = round_index % len(names) if rotate else 0
        for name in names[first:] + names[:first]:
            windows[name].append(timed_window(runs[name]))
        if after_round is not None:
            after_round(round_index, windows)
    return windows


def repeat_for(seconds: float, one_pass: Callable[[], object]) -> tuple[int, float]:
    """Run `one_pass()` until `seconds` pass (at least once); returns (passes, seconds)."""
    count, started = 0, time.perf_counter()
    while True:
        one_pass()
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return count, elapsed


def medians(values: Mapping[str, Sequence[float]]) -> dict[str, float]:
    return {name: statistics.median(v) for name, v in values.items()}


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Window by window numerator / denominator (windows of the same round compared)."""
    return [a / b for a, b in zip(numerators, denominators)]


def write_json(path: str, result: dict, indent: int) -> None:
    """Write a benchmark's JSON report, creating its directory."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=indent)


def write_table(path: str, lines: list[str]) -> None:
    """Write a benchmark's markdown table (results/<name>.md) and print it."""
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def write_report(json_path: str, result: dict, table: list[str], indent: int = 1) -> None:
    """Write a benchmark's JSON report and, next to it (same name, .md), its markdown table."""
    write_json(json_path, result, indent)
    write_table(os.path.splitext(json_path)[0] + ".md", table)
