"""What a benchmark ran on: the CPU model and the instruction-set flags its figures depend on
(AVX-512 and AVX512-BF16 set the GEMM ceilings, F16C the loader's float16 path)."""
from __future__ import annotations

import platform

FLAGS_THAT_MATTER = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma", "f16c")


def _cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("" where there is none, e.g. not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor()


def cpu_flags() -> list[str]:
    present = set(_cpuinfo("flags").split())
    return sorted(flag for flag in FLAGS_THAT_MATTER if flag in present)


def write_table(path: str, lines: list[str]) -> None:
    """Write a benchmark's markdown table (results/<name>.md) and print it."""
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
