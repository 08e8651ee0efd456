"""The model shape a checkpoint records (meta.json `model_shape`), and the comparison with this run's.

Tables are listed by name with what fixes their weights' meaning (rows, dim, hotness, combiner), next to
the number of numerical features and the dense layer sizes. Checkpoints of format 1 recorded positional
`table_sizes` and one `embedding_dim` (one-hot tables, 13 numerical features): `saved_model_shape` reads
them as table i of this run's contract.
"""
from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Union

from dlrm.config import ModelConfig
from dlrm.features import FeatureContract, TableConfig

# Format-1 checkpoints came from the model that hard-coded Criteo's 13 numerical features.
FORMAT_1_NUMERICAL = 13
_TABLE_FIELDS = ("rows", "dim", "hotness", "combiner")


def table_records(tables: Union[FeatureContract, Sequence[TableConfig]]) -> List[dict]:
    """The tables (a contract's, or a model's) by name with what fixes their weights' meaning (checkpoints and
    the metrics log list them)."""
    listed = tables.tables if isinstance(tables, FeatureContract) else tables
    return [{"name": t.name, "rows": t.rows, "dim": t.dim, "hotness": t.hotness, "combiner": t.combiner}
            for t in listed]


def model_shape(model_cfg: ModelConfig, contract: FeatureContract,
                tables: Optional[Sequence[TableConfig]] = None) -> dict:
    """What a checkpoint must agree with to be restored into the model of `model_cfg` for `contract`, whose
    embedding layer holds `tables` (default: the contract's; see `dlrm.model_tables.model_tables`)."""
    shape = {"arch": model_cfg.arch, "num_numerical": contract.num_numerical,
             "tables": table_records(contract.tables if tables is None else tables)}
    if model_cfg.arch == "widedeep":
        shape.update(model_type=model_cfg.model_type, deep_hidden_units=list(model_cfg.deep_hidden_units))
        return shape
    shape.update(bottom_mlp=list(model_cfg.bottom_mlp), top_mlp=list(model_cfg.top_mlp))
    if model_cfg.arch == "dcnv2":
        shape.update(num_cross_layers=model_cfg.num_cross_layers, cross_projection_dim=model_cfg.cross_projection_dim)
    return shape


def saved_model_shape(meta: Mapping, table_names: Sequence[str]) -> dict:
    """The checkpoint's model shape in today's form (format 1: its table i is named `table_names[i]`; empty
    if it recorded none)."""
    saved = meta.get("model_shape") or {}
    if "tables" in saved or "table_sizes" not in saved:
        return dict(saved)
    upgraded = {key: value for key, value in saved.items() if key not in ("table_sizes", "embedding_dim")}
    names = list(table_names) + [f"t{i}" for i in range(len(table_names), len(saved["table_sizes"]))]
    upgraded["tables"] = [{"name": name, "rows": int(rows), "dim": int(saved["embedding_dim"]), "hotness": 1,
                           "combiner": "sum"} for name, rows in zip(names, saved["table_sizes"])]
    upgraded.setdefault("num_numerical", FORMAT_1_NUMERICAL)
    return upgraded


def table_mismatch(saved: Sequence[Mapping], ours: Sequence[Mapping]) -> Optional[str]:
    """The first difference between two table lists, naming the table; None if they agree."""
    for i, (theirs, mine) in enumerate(zip(saved, ours)):
        if theirs.get("name") != mine["name"]:
            return (f"its table {i} is {theirs.get('name')!r} and this model's is {mine['name']!r} (a categorical "
                    f"feature renamed, added, removed or moved)")
        for field in _TABLE_FIELDS:
            if theirs.get(field) != mine[field]:
                return f"table {mine['name']!r} has {field} {theirs.get(field)!r} there and {mine[field]!r} here"
    if len(saved) != len(ours):
        names = {t.get("name") for t in saved} ^ {t["name"] for t in ours}
        return (f"it has {len(saved)} tables and this model {len(ours)} (tables in only one of them: "
                f"{sorted(str(n) for n in names)})")
    return None


def shape_mismatch(saved: Mapping, ours: Mapping) -> Optional[str]:
    """What differs between a checkpoint's model shape and ours (one thing, naming it), or None."""
    for key, value in ours.items():
        theirs = saved.get(key)
        if key == "tables" and isinstance(theirs, list):
            found = table_mismatch(theirs, value)
            if found:
                return found
        elif theirs != value:
            return f"{key} is {theirs!r} there and {value!r} here"
    return None

