"""Distributed DLRM trainer for Slurm clusters (TensorFlow 2, Horovod or MPI).

Importing the package sets `TF_USE_LEGACY_KERAS=1` (unless it is set already) when the `tf-keras`
package is installed: TensorFlow >= 2.16 reads it at its own import and then routes `tf.keras` to Keras 2,
and every module here that imports TensorFlow imports this package first; ranks and workers started
from here inherit it. Without `tf-keras` (the TensorFlow 2.15 stack, Keras 2 bundled) it stays unset,
since there it would make `tf.keras` fail to import. The package's own code takes Keras from `dlrm.keras2`.
"""
import importlib.util as _importlib_util
import os as _os

if _importlib_util.find_spec("tf_keras") is not None:
    _os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
