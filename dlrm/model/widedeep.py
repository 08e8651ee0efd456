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

from typing import Callable, List, Optional, Tuple

import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.embedding.base import EmbeddingCollection
from dlrm.features import FeatureContract
from dlrm.model.base import EmbeddingModel
from dlrm.model.cross_ids import embedding_ids
from dlrm.model.dropout import relu_dropout
from dlrm.model.mlp import MLP, layer_seed
from dlrm.model.precision import compute_dtype, keras_policy
from dlrm.model.shape_rules import check_model_shape
from dlrm.model_tables import has_deep, has_wide, id_copies, model_crosses, model_tables


def cut_blocks(blocks: List[tf.Tensor], width: int) -> Tuple[List[tf.Tensor], List[tf.Tensor]]:
    """Column blocks [B, w_i] -> (the blocks of columns [0, width), the blocks of the rest), in order. The
    others pass uncopied; a block across the cut (the sharded layer's one block) is cut by one split, whose
    gradient is one concat (two slices' gradients would each be a zero-padded full-width copy)."""
    left: List[tf.Tensor] = []
    right: List[tf.Tensor] = []
    start = 0
    for block in blocks:
        size = int(block.shape[1])
        if start + size <= width:
            left.append(block)
        elif start >= width:
            right.append(block)
        else:
            head, tail = tf.split(block, [width - start, size - (width - start)], axis=1)
            left.append(head)
            right.append(tail)
        start += size
    return left, right


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

    def _deep_logit(self, deep: MLP, numerical, deep_blocks: List[tf.Tensor], dropout_key):
        x = tf.concat([tf.cast(block, self.dense_dtype) for block in deep_blocks + [numerical]], axis=1)
        hidden_activation: Optional[Callable] = None
        if dropout_key is not None and self.dropout > 0.0:
            step, first_row = dropout_key[0], dropout_key[1]

            def hidden_activation(pre_activation, layer):
                return relu_dropout(pre_activation, self.dropout, layer_seed(self.seed, 17), step, first_row, layer)

        return tf.cast(tf.reshape(deep(x, hidden_activation=hidden_activation), [-1]), tf.float32)

    def _wide_logit(self, numerical, wide_blocks: List[tf.Tensor]):
        wide_weights = wide_blocks[0] if len(wide_blocks) == 1 else tf.concat(wide_blocks, axis=1)
        logit = tf.reduce_sum(wide_weights, axis=1) + self.wide_bias
        if self.wide_kernel is not None:
            logit += tf.reshape(tf.matmul(numerical, self.wide_kernel), [-1])
        return logit

    def dense_forward(self, numerical, blocks: List[tf.Tensor], dropout_key=None):
        """numerical [B, n] float32 and the embeddings' column blocks (`lookup_blocks`: the deep tables'
        vectors, then the wide tables' weights) -> logits [B] float32.

        The deep part concatenates its blocks with the numerical features once (its gradient: one split
        into the blocks); the embeddings' vectors are never concatenated whole. `dropout_key`: int64 [2]
        (step, first dataset row) when training with dropout, else None."""
        deep_blocks, wide_blocks = cut_blocks(blocks, self.deep_width)
        logits = tf.zeros(tf.shape(numerical)[:1])
        if self.deep is not None:
            logits += self._deep_logit(self.deep, numerical, deep_blocks, dropout_key)
        if self.wide_bias is not None:
            logits += self._wide_logit(numerical, wide_blocks)
        return logits

    @property
    def input_signature(self) -> List[tf.TensorSpec]:
        return [tf.TensorSpec([None, self.contract.num_numerical], tf.float32),
                tf.TensorSpec([None, self.contract.total_hotness], tf.int32)]

    def embedding_ids(self, categorical) -> tf.Tensor:
        """The batch's ids once per deep and wide copy, then the crossed features' ids."""
        return embedding_ids(tf.convert_to_tensor(categorical, tf.int32), self.copies, self.crosses)

    def call(self, numerical, categorical, training=False, first_row=None, step=None):
        with tf.name_scope(self.embeddings.name):
            blocks = self.embeddings.lookup_blocks(self.embedding_ids(categorical))
        key = None
        if training and first_row is not None and step is not None and self.dropout > 0.0:
            key = tf.stack([tf.cast(step, tf.int64), tf.cast(first_row, tf.int64)])
        return self._dense_fn(tf.convert_to_tensor(numerical, tf.float32), blocks, key)


    @property
    def wide_variables(self) -> List[tf.Variable]:
        """The wide part's variables on this rank (its tables' pieces, the numerical kernel, the bias): FTRL's."""
        found = [var for piece, var in self.embeddings.held_pieces() if piece.table in self.wide_tables]
        return found + [v for v in (self.wide_kernel, self.wide_bias) if v is not None]
