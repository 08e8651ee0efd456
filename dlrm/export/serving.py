"""The object a SavedModel holds: the model's variables and one serving function over named inputs.

Only the variables are tracked (not the Keras model object), so the SavedModel holds the weights and
one traced graph of plain TensorFlow ops: loading it needs TensorFlow alone, not this package.
"""
from __future__ import annotations

import tensorflow as tf

from dlrm.export.inputs import ServingLayout
from dlrm.keras2 import keras


def serving_module(model: keras.Model, layout: ServingLayout) -> tf.Module:
    """A tf.Module with `.serve(inputs) -> {"logit", "probability"}` (float32 [B]) and the model's variables."""
    module = tf.Module()
    module.weights = list(model.variables)  # captured by `serve`: tracked so that the SavedModel stores them

    @tf.function(autograph=False, input_signature=[layout.specs()])  # no tensor-dependent Python control flow
    def serve(inputs):
        numerical, categorical = layout.model_inputs(inputs)
        logits = model(numerical, categorical, training=False)
        return {"logit": tf.identity(logits, name="logit"), "probability": tf.sigmoid(logits, name="probability")}

    module.serve = serve
    return module
