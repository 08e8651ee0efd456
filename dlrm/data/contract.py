"""The feature contract of a dataset, read from its feature spec (see `dlrm.features`)."""
from __future__ import annotations

from dlrm.data.feature_spec import FeatureSpec
from dlrm.features import FeatureContract, TableConfig


def contract_from_spec(spec: FeatureSpec, embedding_dim: int, combiner: str = "sum") -> FeatureContract:
    """Label, numerical features and one table per categorical feature, in the spec's channel order.

    `embedding_dim` and `combiner` apply to every table whose feature does not set its own
    (`embedding_dim` / `combiner` keys of its feature_spec entry).
    """
    tables = []
    for name in spec.categorical_names:
        info = spec.feature_spec[name]
        tables.append(TableConfig(name=name, rows=int(info["cardinality"]),
                                  dim=int(info.get("embedding_dim", embedding_dim)),
                                  combiner=str(info.get("combiner", combiner))))
    return FeatureContract(label=spec.label_name, numerical=tuple(spec.numerical_names), tables=tuple(tables))
