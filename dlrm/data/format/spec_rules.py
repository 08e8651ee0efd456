"""The feature spec's channel names and the rules a single feature entry must follow.

Kept apart from `dlrm.data.format.feature_spec` (which checks how features, channels and files fit together)
so both the spec and the writer can name the same rule in the same words.
"""
from __future__ import annotations

from typing import Optional, Sequence, TypeGuard

import numpy as np

from dlrm.features import COMBINERS

LABEL_CHANNEL = "label"
NUMERICAL_CHANNEL = "numerical"
CATEGORICAL_CHANNEL = "categorical"  # the legacy name of the one-hot channel
ONEHOT_CHANNEL = "onehot_categorical"
MULTIHOT_CHANNEL = "multihot_categorical"
MAP_CHANNEL = "map"  # optional per-row group id (e.g. a display id), for ranking metrics
ONEHOT_CHANNELS = (CATEGORICAL_CHANNEL, ONEHOT_CHANNEL)
CATEGORICAL_CHANNELS = (CATEGORICAL_CHANNEL, ONEHOT_CHANNEL, MULTIHOT_CHANNEL)
CHANNELS = (LABEL_CHANNEL, NUMERICAL_CHANNEL, CATEGORICAL_CHANNEL, ONEHOT_CHANNEL, MULTIHOT_CHANNEL, MAP_CHANNEL)
ONE_FEATURE_PER_FILE = (LABEL_CHANNEL, MAP_CHANNEL) + CATEGORICAL_CHANNELS

CATEGORICAL_DTYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))
NUMERICAL_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
GROUP_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))

SPLIT_BINARY = "split_binary"
CSV = "csv"
PARQUET = "parquet"  # NVIDIA's Wide & Deep BYO format (read by the transcoder only)
CHUNK_TYPES = (SPLIT_BINARY, CSV, PARQUET)
GROUP_FILE = "group.bin"


def categorical_dtype(cardinality: int) -> np.dtype:
    """Smallest of int8/int16/int32 holding ids 0 .. cardinality-1 (signed: the -1 padding fits too)."""
    for dtype in CATEGORICAL_DTYPES:
        if cardinality - 1 <= np.iinfo(dtype).max:
            return dtype
    raise ValueError(f"cardinality {cardinality} does not fit int32 ids")


def _is_int(value) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def feature_problems(name: str, info, channel: Optional[str]) -> list[str]:
    """Why a feature_spec entry cannot be used in its channel (empty if it can)."""
    if not isinstance(info, dict) or "dtype" not in info:
        return [f"feature {name!r} needs a dtype"]
    try:
        dtype = np.dtype(info["dtype"])
    except TypeError:
        return [f"feature {name!r} has unknown dtype {info['dtype']!r}"]
    if channel in CATEGORICAL_CHANNELS:
        return _categorical_problems(name, info, dtype, channel == MULTIHOT_CHANNEL)
    if channel == NUMERICAL_CHANNEL and dtype not in NUMERICAL_DTYPES:
        return [f"numerical feature {name!r} has dtype {dtype.name}; use float16 or float32"]
    if channel == LABEL_CHANNEL and dtype != np.dtype(bool):
        return [f"label feature {name!r} has dtype {dtype.name}; use bool"]
    if channel == MAP_CHANNEL and dtype not in GROUP_DTYPES:
        return [f"map (group id) feature {name!r} has dtype {dtype.name}; use int32 or int64"]
    return []


def _categorical_problems(name: str, info: dict, dtype: np.dtype, multi_hot: bool) -> list[str]:
    kind = "multi-hot" if multi_hot else "categorical"
    card = info.get("cardinality")
    if not _is_int(card) or card < 1:
        return [f"{kind} feature {name!r} needs an integer cardinality >= 1, got {card!r}"]
    if dtype not in CATEGORICAL_DTYPES:
        return [f"{kind} feature {name!r} has dtype {dtype.name}; use int8, int16 or int32"]
    found = []
    if card - 1 > np.iinfo(dtype).max:
        found.append(f"{kind} feature {name!r}: dtype {dtype.name} cannot hold ids up to {card - 1}")
    hotness = info.get("max_hotness", None if multi_hot else 1)
    if multi_hot and (not _is_int(hotness) or hotness < 1):
        found.append(f"multi-hot feature {name!r} needs an integer max_hotness >= 1, got {hotness!r}")
    elif not multi_hot and hotness != 1:
        found.append(f"categorical feature {name!r} has max_hotness {hotness!r}: a one-hot feature has one id per "
                     f"row; list it under channel {MULTIHOT_CHANNEL!r} instead")
    dim = info.get("embedding_dim")
    if dim is not None and (not _is_int(dim) or dim < 1):
        found.append(f"{kind} feature {name!r}: embedding_dim must be an integer >= 1, got {dim!r}")
    combiner = info.get("combiner")
    if combiner is not None and combiner not in COMBINERS:
        found.append(f"{kind} feature {name!r}: combiner must be one of {list(COMBINERS)}, got {combiner!r}")
    return found


def channel_problems(channel_spec: dict) -> list[str]:
    """Channel-level rules: known names, one label, one one-hot channel name, at most one group id."""
    p = [f"channel_spec has unknown channel {channel!r} (known: {list(CHANNELS)})"
         for channel in channel_spec if channel not in CHANNELS]
    labels = channel_spec.get(LABEL_CHANNEL)
    if not isinstance(labels, list) or len(labels) != 1:
        p.append(f"channel_spec.{LABEL_CHANNEL} must list exactly one feature, got {labels!r}")
    if all(channel in channel_spec for channel in ONEHOT_CHANNELS):
        p.append(f"channel_spec has both {CATEGORICAL_CHANNEL!r} and {ONEHOT_CHANNEL!r} (two names of the one-hot "
                 f"channel): use one of them")
    groups = channel_spec.get(MAP_CHANNEL)
    if isinstance(groups, list) and len(groups) > 1:
        p.append(f"channel_spec.{MAP_CHANNEL} lists at most one feature (the per-row group id), got {groups!r}")
    return p


def split_binary_chunks(mapping: str, label: str, numerical: Sequence[str], categorical: Sequence[str],
                        group: Optional[str]) -> list[dict]:
    """The source_spec chunks of one mapping of a split-binary dataset (`FeatureSpec.split_binary`)."""
    chunks = [{"type": SPLIT_BINARY, "features": [label], "files": [f"{mapping}/label.bin"]}]
    if numerical:
        chunks.append({"type": SPLIT_BINARY, "features": list(numerical), "files": [f"{mapping}/numerical.bin"]})
    chunks += [{"type": SPLIT_BINARY, "features": [name], "files": [f"{mapping}/cat_{i}.bin"]}
               for i, name in enumerate(categorical)]
    if group is not None:
        chunks.append({"type": SPLIT_BINARY, "features": [group], "files": [f"{mapping}/{GROUP_FILE}"]})
    return chunks


def channel_membership(channel_spec: dict, feature_spec: dict) -> tuple[list[str], dict[str, str]]:
    """(problems, feature -> channel) of the channels' feature lists: each a list, each feature in one
    channel only and present in feature_spec."""
    p: list[str] = []
    channel_of: dict[str, str] = {}
    for channel in CHANNELS:
        names = channel_spec.get(channel) or []
        if not isinstance(names, list):
            p.append(f"channel_spec.{channel} must be a list of feature names")
            continue
        for name in names:
            if name in channel_of:
                p.append(f"feature {name!r} is in channel {channel_of[name]!r} and again in {channel!r}")
            channel_of[name] = channel
            if name not in feature_spec:
                p.append(f"channel_spec.{channel} names feature {name!r}, which is missing from feature_spec")
    return p, channel_of
