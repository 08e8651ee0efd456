"""The recommender model: embeddings + bottom MLP + interaction (dot or DCNv2 cross) + top MLP.

The model sees its embeddings only through `EmbeddingCollection` (ids in, column blocks of vectors out), so the
hybrid-parallel layer replaces the single-process one without any change here. Everything after the
lookup ("the dense part") is data-parallel; with `xla=True` it alone is `jit_compile`d, which keeps
the embedding gradients sparse (`tf.IndexedSlices` from the gathers outside XLA).
"""
from __future__ import annotations

from typing import List, Optional

import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.embedding.base import EmbeddingCollection
from dlrm.features import FeatureContract
from dlrm.model.base import EmbeddingModel
from dlrm.model.dcnv2 import LowRankCrossNetwork
from dlrm.model.interaction import dot_interaction, dot_interaction_output_dim, embedding_dot_interaction
from dlrm.model.mlp import MLP
from dlrm.model.precision import compute_dtype, keras_policy
from dlrm.model.shape_rules import check_model_shape


class RecommenderModel(EmbeddingModel):
    """call(numerical [B, n] float32, categorical [B, total_hotness] int32, training=False) -> logits [B] float32.

    The widths come from the feature contract: n numerical features (0 allowed: then there is no bottom
    MLP) and the tables' ids side by side; the embedding layer returns their vectors concatenated
    [B, total_dim]. The DLRM dot interaction views them as [B, T, D] (one dim for all tables, equal to
    the bottom MLP's last layer); DCNv2 crosses the concatenation (per-table dims allowed).
    """

    def __init__(self, model_cfg: ModelConfig, contract: FeatureContract, embeddings: EmbeddingCollection,
                 amp: bool = False, xla: bool = False):
        super().__init__(name=f"{model_cfg.arch}_model", dtype="float32")
        check_model_shape(model_cfg, contract)
        if tuple(embeddings.tables) != tuple(contract.tables):
            raise ValueError(f"the embedding layer's tables {list(embeddings.tables)} differ from the feature "
                             f"contract's {list(contract.tables)}")
        self.arch = model_cfg.arch
        self.contract = contract
        self.dense_dtype = compute_dtype(amp)
        policy = keras_policy(amp)
        seed = int(model_cfg.seed)

        self.embeddings = embeddings
        self.bottom_mlp: Optional[MLP] = None
        if contract.num_numerical:
            self.bottom_mlp = MLP(contract.num_numerical, model_cfg.bottom_mlp, relu_last=True,
                                  seed=seed * 10 + 1, dtype=policy, name="bottom_mlp")
        bottom_width = self.bottom_mlp.output_dim if self.bottom_mlp is not None else 0
        self.cross: Optional[LowRankCrossNetwork] = None
        if self.arch == "dlrm":
            top_input = dot_interaction_output_dim(contract.num_tables, contract.tables[0].dim,
                                                   with_bottom=self.bottom_mlp is not None)
        else:
            top_input = bottom_width + contract.total_dim
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

    def dense_forward(self, numerical, blocks):
        """numerical [B, n] float32 and the embeddings' column blocks (`lookup_blocks`) -> logits [B] float32:
        the data-parallel part."""
        dtype = self.dense_dtype
        bottom = self.bottom_mlp(tf.cast(numerical, dtype)) if self.bottom_mlp is not None else None
        blocks = [tf.cast(block, dtype) for block in blocks]
        if self.cross is None:
            features = (embedding_dot_interaction(blocks, self.contract.tables[0].dim) if bottom is None
                        else dot_interaction(bottom, blocks))
        else:
            features = self.cross(tf.concat(([] if bottom is None else [bottom]) + blocks, axis=1))
        logits = self.top_mlp(features)
        return tf.cast(tf.reshape(logits, [-1]), tf.float32)

    @property
    def input_signature(self) -> List[tf.TensorSpec]:
        """(numerical, categorical) specs for any batch size: one `tf.function` trace serves all."""
        return [tf.TensorSpec([None, self.contract.num_numerical], tf.float32),
                tf.TensorSpec([None, self.contract.total_hotness], tf.int32)]

    def call(self, numerical, categorical, training=False, first_row=None, step=None):
        """`first_row` and `step` key Wide & Deep's dropout; this model has none and ignores them."""
        with tf.name_scope(self.embeddings.name):
            blocks = self.embeddings.lookup_blocks(categorical)
        return self._dense_fn(tf.convert_to_tensor(numerical, tf.float32), blocks)

