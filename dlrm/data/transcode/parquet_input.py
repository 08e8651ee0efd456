"""Parquet in NVIDIA's Wide & Deep "BYO dataset" layout -> split-binary rows (read by `dlrm.data.transcode.convert`).

The input spec follows NVIDIA's rules: mappings `train` and `test`, each one `parquet` chunk listing
its features and files; one column per feature, a list column per multi-hot feature; channels
`label` (exactly one feature), `numerical`, `onehot_categorical` (or `categorical`),
`multihot_categorical` (each feature with an integer `max_hotness`) and `map` (at most one feature, in
`test` at least: it may be missing from `train`); a `dtype`, if given, is int32 / int64 for ids and
float32 / float64 for numericals (the output uses the project's own). Categorical columns must hold
integers in [0, cardinality), numerical columns floats. Files are read in batches of rows (pyarrow),
so memory stays bounded; a bad value stops the run with one message naming the parquet file, the
feature and the row within that file.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.spec_rules import (
    CATEGORICAL_CHANNELS,
    MAP_CHANNEL,
    NUMERICAL_CHANNEL,
    PARQUET,
    categorical_dtype,
    channel_membership,
    channel_problems,
    feature_problems,
)
from dlrm.features import PADDING_ID

MAPPINGS = ("train", "test")  # NVIDIA's BYO layout has exactly these
INPUT_DTYPES = {"categorical": ("int8", "int16", "int32", "int64"),
                NUMERICAL_CHANNEL: ("float16", "float32", "float64")}
MAX_CARDINALITY = 2 ** 31  # ids are stored as int32 at most


def is_parquet_spec(spec: FeatureSpec) -> bool:
    """True if any chunk of the spec is a parquet chunk."""
    return isinstance(spec.source_spec, dict) and any(
        isinstance(chunk, dict) and chunk.get("type") == PARQUET
        for chunks in spec.source_spec.values() if isinstance(chunks, list) for chunk in chunks)


# ------------------------------------------------------------------------------------ the spec
def _feature_problems(name: str, info, channel: str) -> list[str]:
    """The shared feature rules, with NVIDIA's input dtypes (optional) allowed in place of the stored ones."""
    if not isinstance(info, dict):
        return [f"feature {name!r} must be a mapping (cardinality, max_hotness, dtype ...)"]
    kind = "categorical" if channel in CATEGORICAL_CHANNELS else channel
    allowed = INPUT_DTYPES.get(kind)
    dtype = info.get("dtype")
    if allowed is not None and dtype is not None and str(dtype) not in allowed:
        return [f"{channel} feature {name!r} has dtype {dtype!r}; a parquet dataset uses one of {list(allowed)}"]
    stored = dict(info)
    if channel in CATEGORICAL_CHANNELS:
        card = info.get("cardinality")
        stored["dtype"] = "int32"  # checked by the shared rules: a bad cardinality is named there
        if isinstance(card, int) and not isinstance(card, bool):
            if card > MAX_CARDINALITY:
                return [f"{channel} feature {name!r}: cardinality {card} is above {MAX_CARDINALITY} (int32 ids)"]
            if card >= 1:
                stored["dtype"] = categorical_dtype(card).name
    elif channel == NUMERICAL_CHANNEL:
        stored["dtype"] = "float32"
    else:  # label and group id: any integer (or bool) column, checked per value
        return []
    return feature_problems(name, stored, channel)


def spec_problems(spec: FeatureSpec) -> list[str]:
    """Every way the parquet input spec breaks NVIDIA's BYO rules (empty if none)."""
    if not isinstance(spec.feature_spec, dict) or not isinstance(spec.channel_spec, dict) \
            or not isinstance(spec.source_spec, dict):
        return ["feature_spec, channel_spec and source_spec must be mappings"]
    membership, channel_of = channel_membership(spec.channel_spec, spec.feature_spec)
    p = channel_problems(spec.channel_spec) + membership
    p += [problem for name, channel in channel_of.items() if name in spec.feature_spec
          for problem in _feature_problems(name, spec.feature_spec[name], channel)]
    if sorted(spec.source_spec) != sorted(MAPPINGS):
        p.append(f"source_spec has mappings {sorted(spec.source_spec)}: a parquet dataset has exactly "
                 f"{list(MAPPINGS)}")
    for mapping in [m for m in MAPPINGS if m in spec.source_spec]:
        p += _mapping_problems(spec, mapping, channel_of)
    return p


def _mapping_problems(spec: FeatureSpec, mapping: str, channel_of: dict[str, str]) -> list[str]:
    chunks = spec.source_spec[mapping]
    where = f"source_spec.{mapping}"
    if not isinstance(chunks, list) or len(chunks) != 1 or not isinstance(chunks[0], dict):
        return [f"{where} must be a list of exactly one parquet chunk (type, features, files)"]
    chunk = chunks[0]
    features, files = chunk.get("features"), chunk.get("files")
    p = []
    if chunk.get("type") != PARQUET:
        p.append(f"{where}[0] has type {chunk.get('type')!r}; a parquet dataset has only '{PARQUET}' chunks")
    if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
        p.append(f"{where}[0] needs a non-empty list of parquet file paths")
    if not isinstance(features, list):
        return p + [f"{where}[0] needs a list of features"]
    p += [f"{where}[0] names feature {name!r}, which is in no channel of channel_spec"
          for name in features if name not in channel_of]
    for name, channel in channel_of.items():
        if name not in features and (channel != MAP_CHANNEL or mapping == "test"):
            p.append(f"{where}[0] has no column for feature {name!r} (channel {channel})"
                     + (" (the map feature may be missing from train only)" if channel == MAP_CHANNEL else ""))
    return p


# ------------------------------------------------------------------------------------ the values
class ParquetColumns:
    """Which column is which for one mapping, and how each becomes the writer's arrays."""

    def __init__(self, spec: FeatureSpec, features: list[str]):
        self.label = spec.label_name
        self.numerical = spec.numerical_names
        self.onehot = spec.onehot_names
        self.max_hotness = spec.max_hotness
        self.group = spec.group_name if spec.group_name in features else None
        self.columns = [self.label, *self.numerical, *self.onehot, *self.max_hotness] + \
            ([self.group] if self.group else [])

    def check_schema(self, schema: pa.Schema, path: str) -> None:
        """A missing column or one of the wrong type: one message naming the file and the feature."""
        for name in self.columns:
            if schema.get_field_index(name) < 0:
                raise DataError("missing column: the parquet file has no column of this feature", path, name)
            kind = schema.field(name).type
            if name in self.max_hotness:
                ok = _is_list(kind) and pa.types.is_integer(kind.value_type)
                want = "a list of integer ids (multi-hot)"
            elif name in self.numerical:
                ok, want = pa.types.is_floating(kind), "floats (numerical)"
            elif name == self.label:
                ok = pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind)
                want = "0 / 1 (label)"
            else:
                ok, want = pa.types.is_integer(kind), "integer ids" if name in self.onehot else "integer group ids"
            if not ok:
                raise DataError(f"column type {kind}; it must hold {want}", path, name)

    def arrays(self, batch: pa.RecordBatch, path: str, first_row: int) -> tuple:
        """(label, numerical [n, F], one array per table, group or None) of one batch of rows."""
        def column(name: str) -> pa.Array:
            values = batch.column(batch.schema.get_field_index(name))
            if values.null_count:
                row = first_row + int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
                raise DataError("missing value (null)", path, name, row)
            return values

        n = batch.num_rows
        label = column(self.label).to_numpy(zero_copy_only=False)
        numerical = (np.stack([column(name).to_numpy(zero_copy_only=False) for name in self.numerical], axis=1)
                     if self.numerical else np.zeros((n, 0), np.float32))
        tables = [column(name).to_numpy(zero_copy_only=False) for name in self.onehot]
        tables += [_bags(column(name), hotness, path, name, first_row) for name, hotness in self.max_hotness.items()]
        group = None if self.group is None else column(self.group).to_numpy(zero_copy_only=False).astype(np.int64)
        return label, numerical, tables, group


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def _bags(values: pa.Array, hotness: int, path: str, feature: str, first_row: int) -> np.ndarray:
    """A list column -> ids [n, hotness], -1 padded; a list longer than max_hotness or a null id is an error."""
    lengths = values.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
    too_long = np.flatnonzero(lengths > hotness)
    if too_long.size:
        r = int(too_long[0])
        raise DataError(f"a list of {lengths[r]} ids is longer than max_hotness {hotness}", path, feature,
                        first_row + r)
    flat = values.flatten()
    if flat.null_count:
        at = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
        row = int(np.searchsorted(np.cumsum(lengths), at, side="right"))
        raise DataError("missing id (null) in the list", path, feature, first_row + row)
    ids = flat.to_numpy(zero_copy_only=False).astype(np.int64)
    rows = np.repeat(np.arange(lengths.size), lengths)
    negative = np.flatnonzero(ids < 0)
    if negative.size:  # -1 is only padding in the output: a negative id in a list is out of range
        raise DataError(f"id {int(ids[negative[0]])} is outside [0, cardinality)", path, feature,
                        first_row + int(rows[negative[0]]))
    bags = np.full((lengths.size, hotness), PADDING_ID, np.int64)
    bags[rows, np.arange(ids.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = ids
    return bags


def row_batches(path: str, columns: ParquetColumns, batch_rows: int) -> Iterator[tuple[int, tuple]]:
    """(first row within the file, writer arrays) per batch of at most `batch_rows` rows of one file."""
    try:
        reader = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as error:
        raise DataError(f"not a readable parquet file: {error}", path) from None
    columns.check_schema(reader.schema_arrow, path)
    first_row = 0
    for batch in reader.iter_batches(batch_size=batch_rows, columns=columns.columns):
        yield first_row, columns.arrays(batch, path, first_row)
        first_row += batch.num_rows

