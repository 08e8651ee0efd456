"""The compiled steps: one optimisation step and one forward pass, each a `tf.function` traced once.

The loss on each rank is `sum(BCE over its rows) * world_size / global_rows` (docs/architecture.md): the
ranks' gradients then average to the gradient of the global-batch mean, also for a short last batch.
Predictions are logits: AUC only depends on their order, and float32 sigmoids saturate to exactly 1.0
above logit ~17, which would create false ties.
"""
from __future__ import annotations

import contextlib

import tensorflow as tf

from dlrm.train.build import Parts


def make_train_step(parts: Parts, ids_received: bool = False):
    """One optimisation step as a `tf.function`; a single trace serves every batch size.

    `ids_received`: the step takes two more inputs, the output of the embedding's id all-to-all run before
    it (received ids and splits: `dlrm.train.ids_ahead`), and does not exchange the ids itself."""
    model, optimizer, group = parts.model, parts.training_optimizer(), parts.group
    variables = list(model.trainable_variables)
    model_parallel = list(parts.embeddings.model_parallel_variables)
    world_size = float(group.size)
    received_signature = [tf.TensorSpec([None], tf.int32), tf.TensorSpec([group.size], tf.int32)]

    # autograph=False: the step has no data-dependent Python control flow, and converting the
    # optimizer's and Horovod's Python loops costs seconds of tracing per run.
    @tf.function(autograph=False, input_signature=[
        *model.input_signature,
        tf.TensorSpec([None], tf.float32),  # labels
        tf.TensorSpec([], tf.float32),  # rows in the global batch
        tf.TensorSpec([], tf.int64),  # dataset row of this rank's first row (keys dropout masks)
        *(received_signature if ids_received else []),
    ])
    def train_step(numerical, categorical, labels, global_rows, first_row, *received):
        with tf.GradientTape() as tape, _ids_received(parts.embeddings, received):
            logits = model(numerical, categorical, training=True, first_row=first_row, step=optimizer.iterations)
            bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.reduce_sum(bce) * world_size / global_rows
            scaled = optimizer.scale_loss(loss)
        averaging = group.averaging_tape(tape, model_parallel)
        # The loss rides in the gradients' buffer: one fixed float allreduce per step (reproducible bits).
        grads, (mean_loss,) = averaging.gradient_and_means(scaled, variables, [loss])
        optimizer.apply(zip(grads, variables))
        return mean_loss  # the global-batch mean, same on all ranks

    return train_step


def _ids_received(embeddings, received: tuple):
    return embeddings.ids_received(*received) if received else contextlib.nullcontext()


def make_predict_step(model):
    """A `tf.function` (one trace for every batch size, including 0) returning logits."""

    # autograph=False, as in the train step: converting the model's calls costs seconds of tracing per run.
    @tf.function(autograph=False, input_signature=model.input_signature)
    def predict_step(numerical, categorical):
        return model(numerical, categorical, training=False)

    return predict_step
