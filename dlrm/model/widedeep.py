"""Wide & Deep (Cheng et al. 2016; NVIDIA's TF2 Outbrain configuration): logit = wide + deep.

- Wide: a linear model: one weight per id of every categorical feature (the dim-1 `<feature>_wide`
  tables, bags summed), a linear layer over the numerical features and a bias; all start at zero.
- Deep: the deep tables' pooled vectors (per-feature dims, the table's combiner) concatenated with the
  numerical features -> `deep_hidden_units` (ReLU, dropout after each) -> one logit.

Both parts read the same ids: the batch's id columns are fed twice side by side into one
`EmbeddingCollection` holding the deep tables then the wide ones (`dlrm.model_tables.model_tables`),
so one exchange serves both; the wide part's crossed features (`--wide_crosses`) add one id column each,
computed from the batch's ids before the lookup (`dlrm.model.cross_ids`). `--model_type wide|deep` keeps
only that part (its tables, its variables). Dropout masks are keyed by the dataset row
(`dlrm.model.dropout`), so N ranks drop exactly what one process drops. With `xla=True` the dense part
(both parts after the lookup) is compiled.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.embedding.base import EmbeddingCollection
from dlrm.features import FeatureContract
from dlrm.model.base import EmbeddingModel
from dlrm.model.cross_ids import embedding_ids
from dlrm.model.dropout import row_keyed_dropout
from dlrm.model.mlp import MLP, layer_seed
from dlrm.model.precision import compute_dtype, keras_policy
from dlrm.model.shape_rules import check_model_shape
from dlrm.model_tables import has_deep, has_wide, id_copies, model_crosses, model_tables


class WideDeepModel(EmbeddingModel):
    """call(numerical [B, n] float32, categorical [B, total_hotness] int32, training=False, first_row=None,
    step=None) -> logits [B] float32. `first_row` (the dataset row of the batch's first row) and `step`
    key the dropout masks; without them (or with training=False) there is no dropout."""

    def __init__(self, model_cfg: ModelConfig, contract: FeatureContract, embeddings: EmbeddingCollection,
                 amp: bool = False, xla: bool = False):
        super().__init__(name="widedeep_model", dtype="float32")
        check_model_shape(model_cfg, contract)
        expected = model_tables(model_cfg, contract)
        if tuple(embeddings.tables) != expected:
            raise ValueError(f"the embedding layer's tables {[t.name for t in embeddings.tables]} differ from the "
                             f"model's {[t.name for t in expected]}")
        self.arch = model_cfg.arch
        self.contract = contract
        self.embeddings = embeddings
        self.dense_dtype = compute_dtype(amp)
        self.seed = int(model_cfg.seed)
        self.dropout = float(model_cfg.deep_dropout)
        self.copies = id_copies(model_cfg)
        self.crosses = model_crosses(model_cfg, contract)
        self.deep_width = contract.total_dim if has_deep(model_cfg) else 0
        # the wide tables (the features', then the crosses') come after the deep ones (`model_tables`)
        deep_tables = contract.num_tables if has_deep(model_cfg) else 0
        self.wide_tables = range(deep_tables if has_wide(model_cfg) else len(expected), len(expected))
        self.deep: Optional[MLP] = None
        if has_deep(model_cfg):
            self.deep = MLP(contract.num_numerical + contract.total_dim, tuple(model_cfg.deep_hidden_units) + (1,),
                            relu_last=False, seed=self.seed * 10 + 4, dtype=keras_policy(amp), name="deep_mlp",
                            zero_bias=True)
        self.wide_kernel: Optional[tf.Variable] = None
        self.wide_bias: Optional[tf.Variable] = None
        if has_wide(model_cfg):
            if contract.num_numerical:
                self.wide_kernel = tf.Variable(tf.zeros([contract.num_numerical, 1]), name="wide_numerical/kernel")
            self.wide_bias = tf.Variable(tf.zeros([1]), name="wide_numerical/bias")
        self.xla = bool(xla)
        self._dense_fn = (tf.function(self.dense_forward, jit_compile=True, reduce_retracing=True)
                          if self.xla else self.dense_forward)

    def _deep_logit(self, deep: MLP, numerical, deep_vectors, dropout_key):
        x = tf.cast(tf.concat([deep_vectors, numerical], axis=1), self.dense_dtype)
        between: Optional[Callable] = None
        if dropout_key is not None and self.dropout > 0.0:
            step, first_row = dropout_key[0], dropout_key[1]

            def between(h, layer):
                return row_keyed_dropout(h, self.dropout, layer_seed(self.seed, 17), step, first_row, layer)

        return tf.cast(tf.reshape(deep(x, between=between), [-1]), tf.float32)

    def _wide_logit(self, numerical, wide_weights):
        logit = tf.reduce_sum(wide_weights, axis=1) + self.wide_bias
        if self.wide_kernel is not None:
            logit += tf.reshape(tf.matmul(numerical, self.wide_kernel), [-1])
        return logit

    def dense_forward(self, numerical, embedded, dropout_key=None):
        """numerical [B, n], embedded [B, deep dims + wide tables] float32 -> logits [B] float32.

        `dropout_key`: int64 [2] (step, first dataset row) when training with dropout, else None."""
        # One split (its gradient: one concat), not two slices (each gradient a zero-padded full-width copy).
        deep_vectors, wide_weights = tf.split(embedded, [self.deep_width, -1], axis=1)
        logits = tf.zeros(tf.shape(embedded)[:1])
        if self.deep is not None:
            logits += self._deep_logit(self.deep, numerical, deep_vectors, dropout_key)
        if self.wide_bias is not None:
            logits += self._wide_logit(numerical, wide_weights)
        return logits

    @property
    def input_signature(self) -> List[tf.TensorSpec]:
        return [tf.TensorSpec([None, self.contract.num_numerical], tf.float32),
                tf.TensorSpec([None, self.contract.total_hotness], tf.int32)]

    def embedding_ids(self, categorical) -> tf.Tensor:
        """The batch's ids once per deep and wide copy, then the crossed features' ids."""
        return embedding_ids(tf.convert_to_tensor(categorical, tf.int32), self.copies, self.crosses)

    def call(self, numerical, categorical, training=False, first_row=None, step=None):
        embedded = self.embeddings(self.embedding_ids(categorical))
        key = None
        if training and first_row is not None and step is not None and self.dropout > 0.0:
            key = tf.stack([tf.cast(step, tf.int64), tf.cast(first_row, tf.int64)])
        return self._dense_fn(tf.convert_to_tensor(numerical, tf.float32), embedded, key)


    @property
    def wide_variables(self) -> List[tf.Variable]:
        """The wide part's variables on this rank (its tables' pieces, the numerical kernel, the bias): FTRL's."""
        found = [var for piece, var in self.embeddings.held_pieces() if piece.table in self.wide_tables]
        return found + [v for v in (self.wide_kernel, self.wide_bias) if v is not None]
