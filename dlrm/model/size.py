"""The number of trainable parameters of a model, all ranks together (the start-up log prints it): counted
from a built model's variables (`parameter_count`) or from the configuration alone (`parameter_count_of`)."""
from __future__ import annotations

import math

from dlrm.config import ModelConfig
from dlrm.features import FeatureContract
from dlrm.keras2 import keras
from dlrm.model.interaction import dot_interaction_output_dim
from dlrm.model_tables import embedding_parameters, has_deep, has_wide


def parameter_count(model: keras.Model) -> int:
    """Embedding weights (every table's rows x dim, wherever its pieces live) + the dense variables.

    Works for every arch and world size: the tables' sizes come from the embedding layer's table list,
    not from this rank's pieces; the dense variables are the same on every rank."""
    embeddings = model.embeddings
    table_vars = {var.ref() for _, var in embeddings.held_pieces()}
    dense = sum(math.prod(v.shape) for v in model.dense_variables if v.ref() not in table_vars)
    return sum(t.rows * t.dim for t in embeddings.tables) + int(dense)


def _mlp_parameters(input_dim: int, units) -> int:
    total, fan_in = 0, int(input_dim)
    for width in units:
        total += fan_in * int(width) + int(width)
        fan_in = int(width)
    return total


def dense_parameter_count(model_cfg: ModelConfig, contract: FeatureContract) -> int:
    """The dense (data-parallel, non-table) parameters of the model of `model_cfg` for `contract`."""
    n = contract.num_numerical
    if model_cfg.arch == "widedeep":
        deep = _mlp_parameters(n + contract.total_dim, tuple(model_cfg.deep_hidden_units) + (1,)) \
            if has_deep(model_cfg) else 0
        return deep + ((n + 1) if has_wide(model_cfg) else 0)
    bottom = _mlp_parameters(n, model_cfg.bottom_mlp) if n else 0
    bottom_width = int(model_cfg.bottom_mlp[-1]) if n else 0
    if model_cfg.arch == "dlrm":
        top_input = dot_interaction_output_dim(contract.num_tables, contract.tables[0].dim, with_bottom=n > 0)
        cross = 0
    else:
        top_input = bottom_width + contract.total_dim
        rank = int(model_cfg.cross_projection_dim)
        cross = int(model_cfg.num_cross_layers) * (2 * top_input * rank + top_input)
    return bottom + cross + _mlp_parameters(top_input, model_cfg.top_mlp)


def parameter_count_of(model_cfg: ModelConfig, contract: FeatureContract) -> int:
    """`parameter_count` of the model `model_cfg` builds for `contract`, without building it."""
    return embedding_parameters(model_cfg, contract) + dense_parameter_count(model_cfg, contract)
