"""A tiny DLRM / DCNv2 on a one-hot contract, for model-level tests."""
import numpy as np
import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.embedding.local import LocalEmbedding
from dlrm.model.build import build_model
from tests.support.contracts import one_hot_contract

SIZES = [7, 3, 11, 5]
DIM = 8
CONTRACT = one_hot_contract(SIZES, DIM)


def as_blocks(embedded, tables_per_block):
    """embedded [B, T, D] as column blocks [B, k * D] of `tables_per_block` tables each (as `lookup_blocks`)."""
    flat = tf.reshape(embedded, [-1, embedded.shape[1] * embedded.shape[2]])
    return tf.split(flat, [k * embedded.shape[2] for k in tables_per_block], axis=1)


def tiny_model(config, contract=CONTRACT, embedding_seed=None, **variants):
    """`build_model` with a LocalEmbedding of the contract's tables (seeded as the model unless told)."""
    seed = config.seed if embedding_seed is None else embedding_seed
    return build_model(config, contract, LocalEmbedding(contract.tables, seed=seed), **variants)


def tiny_config(arch="dlrm", seed=0):
    return ModelConfig(arch=arch, embedding_dim=DIM, bottom_mlp=(16, DIM), top_mlp=(32, 16, 1),
                       num_cross_layers=3, cross_projection_dim=4, seed=seed)


def tiny_batch(batch, seed=0, contract=CONTRACT):
    """(numerical [batch, n], one-hot ids [batch, T]) for a one-hot contract."""
    rng = np.random.default_rng(seed)
    numerical = rng.normal(size=(batch, contract.num_numerical)).astype(np.float32)
    categorical = np.stack([rng.integers(0, t.rows, size=batch) for t in contract.tables], axis=1).astype(np.int32)
    return tf.constant(numerical), tf.constant(categorical.reshape(batch, contract.num_tables))
