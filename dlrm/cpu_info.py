"""What the CPU can do, from /proc/cpuinfo: its model name and instruction-set flags.

The trainer asks whether bfloat16 arithmetic is native (`--amp` on CPU computes in bfloat16, which is fast
only with AVX512-BF16 or AMX on x86, BF16 on Arm; elsewhere TensorFlow emulates it and it is slower than
float32). The benchmarks record the model and flags next to every figure.
"""
from __future__ import annotations

import platform
from typing import FrozenSet

CPUINFO = "/proc/cpuinfo"

# The flags that make bfloat16 matrix math native: x86 (AVX512-BF16, AMX-BF16) and Arm (the BF16 extension).
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpuinfo_field(field: str, path: str = CPUINFO) -> str:
    """The first value of `field` in /proc/cpuinfo ("" where there is none, e.g. not Linux)."""
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == field:
                    return value.strip()
    except OSError:
        pass
    return ""


def cpu_model(path: str = CPUINFO) -> str:
    return cpuinfo_field("model name", path) or platform.processor()


def cpu_flags(path: str = CPUINFO) -> FrozenSet[str]:
    """The CPU's instruction-set flags: `flags` on x86, `Features` on Arm (empty where unknown)."""
    return frozenset((cpuinfo_field("flags", path) or cpuinfo_field("Features", path)).split())


def native_bf16(flags: FrozenSet[str]) -> bool:
    """Whether a CPU with these flags computes bfloat16 matrix products in hardware."""
    return bool(flags & NATIVE_BF16_FLAGS)
