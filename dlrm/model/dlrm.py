"""The recommender model: embeddings + bottom MLP + interaction (dot or DCNv2 cross) + top MLP.

The model sees its embeddings only through `EmbeddingCollection` (ids in, vectors out), so the
hybrid-parallel layer replaces the single-process one without any change here. Everything after the
lookup ("the dense part") is data-parallel; with `xla=True` it alone is `jit_compile`d, which keeps
the embedding gradients sparse (`tf.IndexedSlices` from the gathers outside XLA).
"""
from __future__ import annotations

from typing import List

import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.data.criteo import NUM_NUMERICAL
from dlrm.embedding.base import EmbeddingCollection
from dlrm.model.dcnv2 import LowRankCrossNetwork
from dlrm.model.interaction import dot_interaction, dot_interaction_output_dim
from dlrm.model.mlp import MLP
from dlrm.model.precision import compute_dtype, keras_policy


class RecommenderModel(tf.keras.Model):
    """call(numerical [B,13] float32, categorical [B,T] int32, training=False) -> logits [B] float32."""

    def __init__(self, model_cfg: ModelConfig, embeddings: EmbeddingCollection,
                 amp: bool = False, xla: bool = False):
        super().__init__(name=f"{model_cfg.arch}_model", dtype="float32")
        if model_cfg.problems():
            raise ValueError("; ".join(model_cfg.problems()))
        if embeddings.dims[0] != model_cfg.embedding_dim:
            raise ValueError(
                f"embedding dim {embeddings.dims[0]} differs from ModelConfig.embedding_dim "
                f"{model_cfg.embedding_dim}"
            )
        self.arch = model_cfg.arch
        self.num_tables = len(embeddings.table_sizes)
        self.dim = embeddings.dims[0]
        self.dense_dtype = compute_dtype(amp)
        policy = keras_policy(amp)
        seed = int(model_cfg.seed)

        self.embeddings = embeddings
        self.bottom_mlp = MLP(NUM_NUMERICAL, model_cfg.bottom_mlp, relu_last=True,
                              seed=seed * 10 + 1, dtype=policy, name="bottom_mlp")
        if self.arch == "dlrm":
            self.cross = None
            top_input = dot_interaction_output_dim(self.num_tables, self.dim)
        else:
            top_input = self.bottom_mlp.output_dim + self.num_tables * self.dim
            self.cross = LowRankCrossNetwork(top_input, model_cfg.num_cross_layers,
                                             model_cfg.cross_projection_dim, seed=seed * 10 + 2,
                                             dtype=policy, name="cross")
        self.top_mlp = MLP(top_input, model_cfg.top_mlp, relu_last=False,
                           seed=seed * 10 + 3, dtype=policy, name="top_mlp")
        self.xla = bool(xla)
        self._dense_fn = (
            tf.function(self.dense_forward, jit_compile=True, reduce_retracing=True)
            if self.xla else self.dense_forward
        )

    def dense_forward(self, numerical, embedded):
        """numerical [B,13], embedded [B,T,D] float32 -> logits [B] float32 (the data-parallel part)."""
        dtype = self.dense_dtype
        bottom = self.bottom_mlp(tf.cast(numerical, dtype))
        embedded = tf.cast(embedded, dtype)
        if self.cross is None:
            features = dot_interaction(bottom, embedded)
        else:
            flat = tf.reshape(embedded, [-1, self.num_tables * self.dim])
            features = self.cross(tf.concat([bottom, flat], axis=1))
        logits = self.top_mlp(features)
        return tf.cast(tf.reshape(logits, [-1]), tf.float32)

    @property
    def input_signature(self) -> List[tf.TensorSpec]:
        """(numerical, categorical) specs for any batch size: one `tf.function` trace serves all."""
        return [tf.TensorSpec([None, NUM_NUMERICAL], tf.float32),
                tf.TensorSpec([None, self.num_tables], tf.int32)]

    def call(self, numerical, categorical, training=False):
        embedded = tf.reshape(self.embeddings(categorical), [-1, self.num_tables, self.dim])
        return self._dense_fn(tf.convert_to_tensor(numerical, tf.float32), embedded)

    @property
    def embedding_variables(self) -> List[tf.Variable]:
        return list(self.embeddings.trainable_variables)

    @property
    def dense_variables(self) -> List[tf.Variable]:
        """Trainable variables that are data-parallel (allreduced): all but the model-parallel shards."""
        model_parallel = {v.ref() for v in self.embeddings.model_parallel_variables}
        return [v for v in self.trainable_variables if v.ref() not in model_parallel]


def build_model(model_cfg: ModelConfig, embeddings: EmbeddingCollection,
                amp: bool = False, xla: bool = False) -> RecommenderModel:
    """The model for `model_cfg.arch`, with every variable created (safe to restore into right away)."""
    return RecommenderModel(model_cfg, embeddings, amp=amp, xla=xla)
