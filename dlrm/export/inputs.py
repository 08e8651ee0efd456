"""The serving inputs: named, fixed-dtype tensors a client fills, and how they become the model's
(numerical [B, n], categorical ids [B, total_hotness]) batch.

- `numerical` float32 [B, n]: the numerical features in the feature spec's order (absent when n = 0);
- `onehot` int32 [B, k]: one id per one-hot feature, in table order (absent without one-hot features);
- one int32 [B, max_hotness] input per multi-hot feature, named after the feature: its ids first,
  then -1 padding (an all -1 row is an empty bag).

Shapes come from the feature contract; `describe()` is the JSON saved with the model so a client
knows the layout without this package.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

from dlrm.export.errors import ExportError
from dlrm.features import PADDING_ID, FeatureContract

NUMERICAL = "numerical"
ONEHOT = "onehot"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # a signature key every client (and saved_model_cli) accepts


@dataclass(frozen=True)
class ServingInput:
    name: str
    dtype: str  # "float32" or "int32"
    width: int
    features: Tuple[str, ...]  # the features of its columns (a multi-hot input: its one feature)


class ServingLayout:
    """The serving inputs of a model over `contract`, and their mapping to the model's inputs."""

    def __init__(self, contract: FeatureContract):
        self.contract = contract
        onehot = tuple(t.name for t in contract.tables if not t.multi_hot)
        inputs: List[ServingInput] = []
        if contract.num_numerical:
            inputs.append(ServingInput(NUMERICAL, "float32", contract.num_numerical, tuple(contract.numerical)))
        if onehot:
            inputs.append(ServingInput(ONEHOT, "int32", len(onehot), onehot))
        for table in contract.tables:
            if table.multi_hot:
                _check_name(table.name)
                inputs.append(ServingInput(table.name, "int32", table.hotness, (table.name,)))
        self.inputs: Tuple[ServingInput, ...] = tuple(inputs)

    def specs(self) -> Dict[str, tf.TensorSpec]:
        return {i.name: tf.TensorSpec([None, i.width], tf.as_dtype(i.dtype), name=i.name) for i in self.inputs}

    def model_inputs(self, inputs: Dict[str, tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
        """Serving inputs -> (numerical [B, n] float32, categorical [B, total_hotness] int32) in table order."""
        batch = tf.shape(inputs[self.inputs[0].name])[0]
        numerical = inputs[NUMERICAL] if NUMERICAL in inputs else tf.zeros([batch, 0], tf.float32)
        blocks, next_onehot = [], 0
        for table in self.contract.tables:
            if table.multi_hot:
                blocks.append(inputs[table.name])
            else:
                blocks.append(inputs[ONEHOT][:, next_onehot:next_onehot + 1])
                next_onehot += 1
        return numerical, tf.concat(blocks, axis=1)

    def from_batch(self, numerical: np.ndarray, categorical: np.ndarray) -> Dict[str, np.ndarray]:
        """A trainer batch (numerical [B, n], categorical [B, total_hotness]) as serving inputs (benchmarks)."""
        out: Dict[str, np.ndarray] = {}
        if self.contract.num_numerical:
            out[NUMERICAL] = np.asarray(numerical, np.float32)
        onehot = [categorical[:, slice(*self.contract.id_columns(t))] for t, table in enumerate(self.contract.tables)
                  if not table.multi_hot]
        if onehot:
            out[ONEHOT] = np.ascontiguousarray(np.concatenate(onehot, axis=1), np.int32)
        for t, table in enumerate(self.contract.tables):
            if table.multi_hot:
                out[table.name] = np.ascontiguousarray(categorical[:, slice(*self.contract.id_columns(t))], np.int32)
        return out

    def describe(self) -> dict:
        """The layout as JSON (saved as assets/serving_inputs.json)."""
        tables = {t.name: t for t in self.contract.tables}
        described = []
        for item in self.inputs:
            entry: dict = {"name": item.name, "dtype": item.dtype, "shape": [None, item.width],
                           "features": list(item.features)}
            if item.name == ONEHOT:
                entry["cardinalities"] = [tables[name].rows for name in item.features]
            elif item.name != NUMERICAL:
                table = tables[item.name]
                entry.update(cardinality=table.rows, combiner=table.combiner, padding=PADDING_ID)
            described.append(entry)
        return {"inputs": described,
                "outputs": [{"name": "logit", "dtype": "float32", "shape": [None]},
                            {"name": "probability", "dtype": "float32", "shape": [None]}],
                "signature": "serving_default"}


def _check_name(name: str) -> None:
    if not _NAME.match(name) or name in (NUMERICAL, ONEHOT):
        raise ExportError(f"multi-hot feature {name!r} cannot name a serving input: a name of letters, digits and "
                          f"'_' starting with a letter, other than {NUMERICAL!r} and {ONEHOT!r}, is needed "
                          f"(rename the feature in feature_spec.yaml)")
