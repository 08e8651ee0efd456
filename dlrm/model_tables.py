"""The embedding tables a model needs for a dataset's features (pure Python, no TensorFlow).

Beside the feature contract rather than in `dlrm.model`: the planner, the trainer's build and checkpoints
ask which tables a configuration needs without importing the model.

DLRM and DCNv2 use the feature contract's tables as they are. Wide & Deep keeps, for its deep part, the
contract's tables (per-feature dims and combiners, Glorot-normal start) and, for its wide part, one
linear weight per id: a table `<feature>_wide` per feature with the feature's rows and hotness, dim 1,
summed bags, zero start, then one dim-1 table `<A>_x_<B>_wide` per crossed pair of features
(`--wide_crosses`, `dlrm.feature_crosses`). All of them live in one `EmbeddingCollection`, so one exchange of
ids serves both parts, and the planner, checkpoints and logs see ordinary tables.
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

from dlrm.config import ModelConfig
from dlrm.feature_crosses import Cross, contract_crosses
from dlrm.features import FeatureContract, TableConfig

WIDE_SUFFIX = "_wide"


def has_deep(model_cfg: ModelConfig) -> bool:
    return model_cfg.arch != "widedeep" or model_cfg.model_type in ("deep", "wide_n_deep")


def has_wide(model_cfg: ModelConfig) -> bool:
    return model_cfg.arch == "widedeep" and model_cfg.model_type in ("wide", "wide_n_deep")


def wide_table(table: TableConfig) -> TableConfig:
    """The wide part's linear weights of one feature: a dim-1 table whose bags are always summed."""
    return TableConfig(f"{table.name}{WIDE_SUFFIX}", table.rows, 1, hotness=table.hotness, combiner="sum",
                       multi_hot=table.multi_hot, initializer="zeros")


def model_crosses(model_cfg: ModelConfig, contract: FeatureContract) -> Tuple[Cross, ...]:
    """The wide part's crossed features (none without a wide part)."""
    if not has_wide(model_cfg):
        return ()
    return contract_crosses(model_cfg.wide_crosses, model_cfg.wide_cross_buckets, contract)


def cross_table(cross: Cross) -> TableConfig:
    """The wide part's weights of one cross: dim 1, one id per row, zero start."""
    return TableConfig(f"{cross.name}{WIDE_SUFFIX}", cross.rows, 1, hotness=1, combiner="sum", initializer="zeros")


def model_tables(model_cfg: ModelConfig, contract: FeatureContract) -> Tuple[TableConfig, ...]:
    """The embedding tables of the model of `model_cfg` for `contract`, in the order of its id columns."""
    if model_cfg.arch != "widedeep":
        return tuple(contract.tables)
    deep = tuple(dataclasses.replace(t, initializer="glorot_normal") for t in contract.tables) \
        if has_deep(model_cfg) else ()
    wide = tuple(wide_table(t) for t in contract.tables) if has_wide(model_cfg) else ()
    return deep + wide + tuple(cross_table(c) for c in model_crosses(model_cfg, contract))


def id_copies(model_cfg: ModelConfig) -> int:
    """How many times the batch's id columns are fed side by side to the model's embedding layer (then
    one column per cross)."""
    return int(has_deep(model_cfg)) + int(has_wide(model_cfg))


def embedding_parameters(model_cfg: ModelConfig, contract: FeatureContract) -> int:
    """Weights in the model's embedding tables (all ranks together)."""
    return sum(t.rows * t.dim for t in model_tables(model_cfg, contract))
