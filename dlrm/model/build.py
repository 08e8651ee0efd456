"""The one place `--arch` becomes a model: DLRM or DCNv2 (`dlrm.model.dlrm`), or Wide & Deep (`dlrm.model.widedeep`)."""
from __future__ import annotations

from typing import Union

from dlrm.config import ModelConfig
from dlrm.embedding.base import EmbeddingCollection
from dlrm.features import FeatureContract
from dlrm.model.dlrm import RecommenderModel
from dlrm.model.widedeep import WideDeepModel

Model = Union[RecommenderModel, WideDeepModel]


def build_model(model_cfg: ModelConfig, contract: FeatureContract, embeddings: EmbeddingCollection,
                amp: bool = False, xla: bool = False) -> Model:
    """The model for `model_cfg.arch` and the dataset's `contract`, with every variable created (safe to
    restore into right away). A contract the model cannot take raises ModelShapeError naming the rule.
    Its embedding layer holds `dlrm.model_tables.model_tables(model_cfg, contract)`."""
    if model_cfg.arch == "widedeep":
        return WideDeepModel(model_cfg, contract, embeddings, amp=amp, xla=xla)
    return RecommenderModel(model_cfg, contract, embeddings, amp=amp, xla=xla)
