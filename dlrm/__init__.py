"""Distributed DLRM trainer for Slurm clusters (TensorFlow 2, Horovod or MPI).

Importing the package sets two of TensorFlow's environment switches (each only where it is not set
already), since TensorFlow reads both at its own import; every module here that imports TensorFlow
imports this package first, and ranks and workers started from here inherit them:

- `TF_USE_LEGACY_KERAS=1` when the `tf-keras` package is installed: TensorFlow >= 2.16 then routes
  `tf.keras` to Keras 2. Without `tf-keras` (the TensorFlow 2.15 stack, Keras 2 bundled) it stays unset,
  since there it would make `tf.keras` fail to import. The package's own code takes Keras from `dlrm.keras2`.
- `TF_ENABLE_ONEDNN_OPTS=1` on x86: TensorFlow turns its oneDNN kernels on by itself only on CPUs with
  AVX512-VNNI, AVX512-BF16 or AMX. Elsewhere (AVX2) it runs Eigen's kernels and allocator, whose batched
  matmul (the dot interaction) and large allocations make the DLRM step ~1.4x slower.
"""
import importlib.util as _importlib_util
import os as _os
import platform as _platform

if _importlib_util.find_spec("tf_keras") is not None:
    _os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
if _platform.machine() in ("x86_64", "AMD64"):
    _os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
