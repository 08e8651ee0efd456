"""What a dataset's feature contract must satisfy for a model configuration, with one message per rule."""
from __future__ import annotations

from typing import List

from dlrm.config import ModelConfig
from dlrm.errors import UserError
from dlrm.feature_crosses import cross_problems
from dlrm.features import FeatureContract, TableConfig


class ModelShapeError(UserError, ValueError):
    """The model cannot be built for this dataset (the message names the rule and the features)."""

    on_every_rank = True  # every rank reads the same spec and flags


def _listed(tables: List[TableConfig]) -> str:
    return ", ".join(f"{t.name!r} (dim {t.dim})" for t in tables)


def dot_interaction_problems(model_cfg: ModelConfig, contract: FeatureContract) -> List[str]:
    """The dot interaction multiplies vectors pairwise: all of one width, and at least two of them."""
    tables = list(contract.tables)
    if not tables:
        return []  # no categorical feature at all: `model_problems` says so
    if contract.num_numerical:
        width = int(model_cfg.bottom_mlp[-1])
        why = (f"the DLRM dot interaction multiplies every embedding with the bottom MLP's output, so every "
               f"table's dim must equal the bottom MLP's last layer ({width}, --bottom_mlp_dims)")
    elif len(tables) < 2:
        return [f"the DLRM dot interaction needs at least two vectors to multiply; this dataset has no numerical "
                f"features and one categorical feature ({tables[0].name!r}): use --arch dcnv2"]
    else:
        width = tables[0].dim
        why = (f"the DLRM dot interaction multiplies the embeddings pairwise (this dataset has no numerical "
               f"features, so no bottom MLP), so every table's dim must equal the first table's ({width})")
    offending = [t for t in tables if t.dim != width]
    if not offending:
        return []
    return [f"{why}; differing: {_listed(offending)}. Set their embedding_dim in the feature spec, change "
            f"--embedding_dim / --bottom_mlp_dims, or use --arch dcnv2 (per-table dims allowed)"]


def model_problems(model_cfg: ModelConfig, contract: FeatureContract) -> List[str]:
    """Why this model cannot be built for `contract` (empty if it can)."""
    found = list(model_cfg.problems()) + contract.problems()
    if not contract.tables:
        found.append("the model needs at least one categorical feature (an embedding table); the feature spec "
                     "has none in its categorical, onehot_categorical or multihot_categorical channels")
    if model_cfg.arch == "dlrm":
        found += dot_interaction_problems(model_cfg, contract)
    found += cross_problems(model_cfg.wide_crosses, contract)
    return found


def check_model_shape(model_cfg: ModelConfig, contract: FeatureContract) -> None:
    found = model_problems(model_cfg, contract)
    if found:
        raise ModelShapeError("; ".join(found))
