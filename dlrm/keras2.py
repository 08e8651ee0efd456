"""Keras 2 on both supported TensorFlow lines; the one place where they differ.

TensorFlow 2.15 bundles Keras 2 as `tf.keras`. From 2.16 on, `tf.keras` is Keras 3 and Keras 2 is the
separate `tf-keras` package (`import tf_keras`), which the models, the sparse optimizers' Keras
counterparts and the tests are written against. The package imports `keras` from here instead of using
`tf.keras`, so it gets Keras 2 whatever `TF_USE_LEGACY_KERAS` was when TensorFlow was first imported
(`dlrm/__init__.py` sets that variable, for code outside the package that uses `tf.keras`).

The other difference: TensorFlow 2.21's CPU scatter-subtract kernel is several times slower than 2.15's, so
the optimizers' sparse row updates compile their large steps with XLA there (`SLOW_SCATTER_KERNEL`,
`dlrm.train.row_subtraction`).
"""
from __future__ import annotations

import tensorflow as tf

FIRST_KERAS3_TENSORFLOW = (2, 16)


def tensorflow_version(version: str = tf.__version__) -> tuple:
    """(major, minor) of a TensorFlow version string such as "2.21.0" or "2.16.0rc1"."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


# Measured slow on 2.21 (and not on 2.15); the versions between were not measured.
SLOW_SCATTER_KERNEL = tensorflow_version() >= (2, 21)

if tensorflow_version() < FIRST_KERAS3_TENSORFLOW:
    from tensorflow import keras
else:
    try:
        import tf_keras as keras
    except ImportError:
        raise ImportError(f"TensorFlow {tf.__version__} bundles Keras 3; this project needs Keras 2: "
                          f"pip install 'tf-keras=={'.'.join(map(str, tensorflow_version()))}.*'") from None

__all__ = ["SLOW_SCATTER_KERNEL", "keras", "tensorflow_version"]
