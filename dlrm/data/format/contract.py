"""The feature contract of a dataset, read from its feature spec (see `dlrm.features`)."""
from __future__ import annotations

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.features import FeatureContract, TableConfig


def contract_from_spec(spec: FeatureSpec, embedding_dim: int, combiner: str = "sum") -> FeatureContract:
    """Label, numerical features, one table per categorical feature in table order (the one-hot channel's,
    then the multi-hot channel's) and the `map` channel's group id, if any.

    `embedding_dim` and `combiner` apply to every table whose feature does not set its own
    (`embedding_dim` / `combiner` keys of its feature_spec entry). A multi-hot table has
    `hotness` = the feature's `max_hotness`.
    """
    bags = spec.max_hotness
    tables = []
    for name in spec.categorical_names:
        info = spec.feature_spec[name]
        tables.append(TableConfig(name=name, rows=int(info["cardinality"]),
                                  dim=int(info.get("embedding_dim", embedding_dim)),
                                  hotness=bags.get(name, 1), combiner=str(info.get("combiner", combiner)),
                                  multi_hot=name in bags))
    return FeatureContract(label=spec.label_name, numerical=tuple(spec.numerical_names), tables=tuple(tables),
                           group=spec.group_name)
