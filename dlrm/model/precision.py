"""Which dtype the dense part computes in (`--amp`).

Mixed precision keeps every variable in float32 and computes the MLPs and the interaction in a
16-bit type: float16 on GPUs (needs loss scaling: its range is narrow), bfloat16 on CPUs (same
exponent range as float32, no loss scaling; fast on AVX512-BF16/AMX machines, emulated and slower than
float32 elsewhere: `amp_note` says which at start-up). Embedding tables always stay float32. The Keras
policy is passed to each layer explicitly; no global state is set.
"""
from __future__ import annotations

from typing import FrozenSet, Optional

import tensorflow as tf

from dlrm.cpu_info import native_bf16


def _gpu_visible() -> bool:
    return bool(tf.config.list_logical_devices("GPU"))


def compute_dtype(amp: bool) -> tf.DType:
    """float32 without amp; float16 with a GPU; bfloat16 on CPU."""
    if not amp:
        return tf.float32
    return tf.float16 if _gpu_visible() else tf.bfloat16


def keras_policy(amp: bool) -> str:
    """Keras dtype-policy name for the dense layers."""
    return {tf.float32: "float32", tf.float16: "mixed_float16", tf.bfloat16: "mixed_bfloat16"}[
        compute_dtype(amp)
    ]


def needs_loss_scaling(amp: bool) -> bool:
    """Only float16 underflows small gradients; bfloat16 has float32's exponent range."""
    return compute_dtype(amp) == tf.float16


def amp_note(amp: bool, cpu_flags: FrozenSet[str]) -> Optional[str]:
    """The start-up line for `--amp`: what the dense part computes in and, on a CPU without bfloat16
    instructions (`cpu_flags` as `dlrm.cpu_info.cpu_flags()` reads them), that it is slower than float32."""
    if not amp:
        return None
    if compute_dtype(amp) == tf.float16:
        return "--amp: the dense part computes in float16 on the GPU, with dynamic loss scaling"
    if native_bf16(cpu_flags):
        return "--amp: the dense part computes in bfloat16 (this CPU has bfloat16 instructions)"
    return ("warning: --amp: this CPU has no bfloat16 instructions (AVX512-BF16, AMX or Arm BF16), so bfloat16 "
            "is emulated and slower than float32 here; train without --amp on this machine")
