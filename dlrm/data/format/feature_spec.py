"""Dataset description (`feature_spec.yaml`), same concepts as NVIDIA's "BYO dataset" feature spec.

Four sections:
- `feature_spec`: per feature its `dtype` and, for categorical features, `cardinality` (multi-hot:
  `max_hotness`; optional `embedding_dim`, `combiner`);
- `source_spec`: per mapping (`train`, `test`) a list of chunks `{type, features, files}`;
- `channel_spec`: which features are the `label`, the `numerical`, the one-hot (`categorical` or
  `onehot_categorical`) and `multihot_categorical` inputs and the `map` (per-row group id);
- `metadata`: free-form (the generator records its ground truth here; `num_rows` per mapping).

File paths in `source_spec` are relative to the directory holding the yaml file. `validate()` checks
the spec against itself and against the files on disk and reports every problem at once.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
import yaml

from dlrm import strict_yaml
from dlrm.atomic import write_text_atomically
from dlrm.data.format.errors import SpecError
from dlrm.data.format.spec_rules import (
    CATEGORICAL_CHANNEL,
    CHANNELS,
    CHUNK_TYPES,
    LABEL_CHANNEL,
    MAP_CHANNEL,
    MULTIHOT_CHANNEL,
    NUMERICAL_CHANNEL,
    ONE_FEATURE_PER_FILE,
    ONEHOT_CHANNEL,
    SPLIT_BINARY,
    categorical_dtype,
    channel_membership,
    channel_problems,
    feature_problems,
    split_binary_chunks,
)

SPEC_FILE_NAME = "feature_spec.yaml"


@dataclass(frozen=True)
class BinaryChunk:
    """One split-binary file: fixed-size records of `len(features) * hotness` values of `dtype`.

    `hotness` > 1 or `multi_hot` only for a multi-hot feature: `hotness` (its max_hotness) ids per row,
    real ids first, then -1 padding.
    """

    path: str  # absolute
    channel: str
    features: tuple[str, ...]
    dtype: np.dtype
    hotness: int = 1
    multi_hot: bool = False

    @property
    def record_bytes(self) -> int:
        return self.dtype.itemsize * len(self.features) * self.hotness

    @property
    def record_shape(self) -> str:
        if self.multi_hot:
            return f"max_hotness {self.hotness} x {self.dtype.name}"
        return f"{len(self.features)} x {self.dtype.name}"


@dataclass
class FeatureSpec:
    feature_spec: Any  # the three parts as loaded from YAML: `validate()` checks their structure
    source_spec: Any
    channel_spec: Any
    metadata: dict = field(default_factory=dict)
    # Directory the file paths are relative to (where feature_spec.yaml lives); not saved.
    base_directory: Optional[str] = None

    # ---------------------------------------------------------------- construction and I/O
    @classmethod
    def criteo_like(cls, cardinalities: Sequence[int], num_numerical: int = 13,
                    mappings: Sequence[str] = ("train", "test"), base_directory: Optional[str] = None,
                    metadata: Optional[dict] = None, multi_hot: Optional[dict] = None,
                    group: Optional[str] = None) -> "FeatureSpec":
        """Split-binary spec shaped like preprocessed Criteo: `label`, `num_0..`, `cat_0..` features
        (plus the `multi_hot` and `group` features of `split_binary`, if given)."""
        return cls.split_binary("label", [f"num_{i}" for i in range(num_numerical)],
                                {f"cat_{i}": int(c) for i, c in enumerate(cardinalities)}, mappings,
                                base_directory, metadata, multi_hot=multi_hot, group=group)

    @classmethod
    def split_binary(cls, label: str, numerical: Sequence[str], categorical: dict,
                     mappings: Sequence[str] = ("train", "test"), base_directory: Optional[str] = None,
                     metadata: Optional[dict] = None, multi_hot: Optional[dict] = None,
                     group: Optional[str] = None) -> "FeatureSpec":
        """Split-binary spec for the given feature names.

        `categorical`: one-hot name -> cardinality; `multi_hot`: name -> (cardinality, max_hotness);
        `group`: name of an int64 per-row group id (channel `map`). Both in order. Files per mapping:
        `<mapping>/label.bin`, `<mapping>/numerical.bin` (float16, all numerical features row-major),
        `<mapping>/cat_<i>.bin` for the i-th categorical feature (one-hot first, then multi-hot) and
        `<mapping>/group.bin`. Without multi-hot or group features the one-hot channel keeps its
        legacy name `categorical`, else it is NVIDIA's `onehot_categorical`.
        """
        multi_hot = dict(multi_hot or {})
        features: dict = {label: {"dtype": "bool"}}
        features.update({name: {"dtype": "float16"} for name in numerical})
        for name, card in categorical.items():
            features[name] = {"dtype": categorical_dtype(int(card)).name, "cardinality": int(card)}
        for name, (card, hotness) in multi_hot.items():
            features[name] = {"dtype": categorical_dtype(int(card)).name, "cardinality": int(card),
                              "max_hotness": int(hotness)}
        onehot = ONEHOT_CHANNEL if multi_hot or group else CATEGORICAL_CHANNEL
        channels = {LABEL_CHANNEL: [label], NUMERICAL_CHANNEL: list(numerical), onehot: list(categorical)}
        if multi_hot:
            channels[MULTIHOT_CHANNEL] = list(multi_hot)
        if group is not None:
            features[group] = {"dtype": "int64"}
            channels[MAP_CHANNEL] = [group]
        source = {mapping: split_binary_chunks(mapping, label, numerical, [*categorical, *multi_hot], group)
                  for mapping in mappings}
        return cls(features, source, channels, dict(metadata or {}), base_directory)

    @classmethod
    def load(cls, path: str) -> "FeatureSpec":
        """Read a spec from a yaml file or from a dataset directory holding `feature_spec.yaml`."""
        if os.path.isdir(path):
            path = os.path.join(path, SPEC_FILE_NAME)
        try:
            with open(path, encoding="utf-8") as f:
                raw = strict_yaml.load(f)
        except FileNotFoundError:
            raise SpecError([f"feature spec file {path} does not exist"], path) from None
        except yaml.YAMLError as e:
            raise SpecError([f"not valid YAML: {e}"], path) from None
        if not isinstance(raw, dict):
            raise SpecError(["top level must be a mapping with feature_spec, source_spec, channel_spec"], path)
        missing = [k for k in ("feature_spec", "source_spec", "channel_spec") if k not in raw]
        if missing:
            raise SpecError([f"missing section {k!r}" for k in missing], path)
        return cls(raw["feature_spec"], raw["source_spec"], raw["channel_spec"], raw.get("metadata") or {},
                   os.path.dirname(os.path.abspath(path)))

    def to_dict(self) -> dict:
        return {"channel_spec": copy.deepcopy(self.channel_spec), "feature_spec": copy.deepcopy(self.feature_spec),
                "metadata": copy.deepcopy(self.metadata), "source_spec": copy.deepcopy(self.source_spec)}

    def save(self, path: str) -> str:
        """Write atomically (temp file + rename) to `path` or `path/feature_spec.yaml`; returns the file."""
        if os.path.isdir(path) or not path.endswith((".yaml", ".yml")):
            os.makedirs(path, exist_ok=True)
            path = os.path.join(path, SPEC_FILE_NAME)
        write_text_atomically(path, yaml.safe_dump(self.to_dict(), sort_keys=True, default_flow_style=None))
        self.base_directory = os.path.dirname(os.path.abspath(path))
        return path

    # ---------------------------------------------------------------- channels
    @property
    def label_name(self) -> str:
        return self.channel_spec[LABEL_CHANNEL][0]

    @property
    def numerical_names(self) -> list[str]:
        return list(self.channel_spec.get(NUMERICAL_CHANNEL) or [])

    @property
    def onehot_channel(self) -> str:
        """The name the spec uses for its one-hot channel (`categorical`, the legacy one, by default)."""
        return ONEHOT_CHANNEL if ONEHOT_CHANNEL in self.channel_spec else CATEGORICAL_CHANNEL

    @property
    def onehot_names(self) -> list[str]:
        return list(self.channel_spec.get(self.onehot_channel) or [])

    @property
    def multihot_names(self) -> list[str]:
        return list(self.channel_spec.get(MULTIHOT_CHANNEL) or [])

    @property
    def max_hotness(self) -> dict[str, int]:
        """Multi-hot feature name -> its max_hotness (ids per row, padded with -1), in channel order."""
        return {name: int(self.feature_spec[name]["max_hotness"]) for name in self.multihot_names}

    @property
    def categorical_names(self) -> list[str]:
        """Every categorical feature in table order: the one-hot channel's, then the multi-hot channel's."""
        return self.onehot_names + self.multihot_names

    @property
    def hotnesses(self) -> list[int]:
        """Id columns per categorical feature in table order (1 for one-hot, max_hotness for multi-hot)."""
        bags = self.max_hotness
        return [bags.get(name, 1) for name in self.categorical_names]

    @property
    def cardinalities(self) -> list[int]:
        """Table sizes in table order (`categorical_names`)."""
        return [int(self.feature_spec[name]["cardinality"]) for name in self.categorical_names]

    @property
    def group_name(self) -> Optional[str]:
        """The `map` channel's feature (a per-row group id), or None."""
        groups = self.channel_spec.get(MAP_CHANNEL) or []
        return groups[0] if groups else None

    @property
    def mappings(self) -> list[str]:
        return list(self.source_spec)

    def dtype(self, feature: str) -> np.dtype:
        return np.dtype(self.feature_spec[feature]["dtype"])

    def channel_of(self, feature: str) -> Optional[str]:
        for channel in CHANNELS:
            if feature in (self.channel_spec.get(channel) or []):
                return channel
        return None

    def resolve(self, relative_path: str) -> str:
        if os.path.isabs(relative_path):
            return relative_path
        return os.path.join(self.base_directory or ".", relative_path)

    # ---------------------------------------------------------------- split-binary layout
    def binary_chunks(self, mapping: str) -> list[BinaryChunk]:
        """The mapping's split-binary files in reader order: label, numerical, categorical channel order.

        Raises SpecError if the mapping is not a valid split-binary layout.
        """
        problems = self._layout_problems(mapping)
        if not problems and any(chunk["type"] != SPLIT_BINARY for chunk in self.source_spec[mapping]):
            problems = [f"mapping {mapping!r} is not split_binary (transcode it: python -m dlrm.data.transcode)"]
        if problems:
            raise SpecError(problems, self._spec_path())
        return self._binary_chunks_unchecked(mapping)

    def _binary_chunks_unchecked(self, mapping: str) -> list[BinaryChunk]:
        by_first_feature = {chunk["features"][0]: chunk for chunk in self.source_spec[mapping]}
        bags = self.max_hotness
        group = self.group_name
        order = ([(self.label_name, LABEL_CHANNEL)] + [(name, NUMERICAL_CHANNEL) for name in self.numerical_names[:1]]
                 + [(name, self.onehot_channel) for name in self.onehot_names]
                 + [(name, MULTIHOT_CHANNEL) for name in self.multihot_names]
                 + ([(group, MAP_CHANNEL)] if group is not None and group in by_first_feature else []))
        chunks = []
        for first, channel in order:
            raw = by_first_feature[first]
            chunks.append(BinaryChunk(self.resolve(raw["files"][0]), channel, tuple(raw["features"]),
                                      self.dtype(first), bags.get(first, 1), first in bags))
        return chunks

    def num_rows(self, mapping: str) -> int:
        """Rows in a split-binary mapping, from the label file's size (validate() checks the others)."""
        label = self.binary_chunks(mapping)[0]
        return os.path.getsize(label.path) // label.record_bytes

    # ---------------------------------------------------------------- validation
    def validate(self, check_files: bool = True, mappings: Optional[Sequence[str]] = None) -> "FeatureSpec":
        """Check every reference and (with `check_files`) every file; raise SpecError listing all problems."""
        structural = self._structure_problems()
        problems = list(structural)
        sections_ok = all(isinstance(x, dict) and x for x in (self.feature_spec, self.source_spec)) and \
            isinstance(self.channel_spec, dict)
        if sections_ok:  # layout problems are reported together with the structural ones
            for mapping in (self.mappings if mappings is None else mappings):
                if mapping not in self.source_spec:
                    problems.append(f"source_spec has no mapping {mapping!r} (has {self.mappings})")
                    continue
                layout = self._layout_problems(mapping)
                problems += layout
                if check_files and not layout and not structural:
                    problems += self._file_problems(mapping)
        if problems:
            raise SpecError(problems, self._spec_path())
        return self

    def _spec_path(self) -> Optional[str]:
        return os.path.join(self.base_directory, SPEC_FILE_NAME) if self.base_directory else None

    def _structure_problems(self) -> list[str]:
        if not isinstance(self.feature_spec, dict) or not self.feature_spec:
            return ["feature_spec must be a non-empty mapping of feature name -> {dtype, cardinality}"]
        if not isinstance(self.channel_spec, dict):
            return ["channel_spec must be a mapping of channel -> list of features"]
        if not isinstance(self.source_spec, dict) or not self.source_spec:
            return ["source_spec must be a non-empty mapping of mapping name -> list of chunks"]
        membership, seen = channel_membership(self.channel_spec, self.feature_spec)
        p = channel_problems(self.channel_spec) + membership
        for name, info in self.feature_spec.items():
            if name not in seen:
                p.append(f"feature {name!r} is in feature_spec but in no channel of channel_spec")
            p += feature_problems(name, info, seen.get(name))
        return p

    def _layout_problems(self, mapping: str) -> list[str]:
        """Chunk structure of one mapping: every channel feature in exactly one chunk; split-binary rules."""
        chunks = self.source_spec.get(mapping)
        where = f"source_spec.{mapping}"
        if not isinstance(chunks, list) or not chunks:
            return [f"{where} must be a non-empty list of chunks"]
        p: list[str] = []
        count: dict[str, int] = {}
        for i, chunk in enumerate(chunks):
            at = f"{where}[{i}]"
            if not isinstance(chunk, dict):
                p.append(f"{at} must be a mapping with type, features, files")
                continue
            ctype, features, files = chunk.get("type"), chunk.get("features"), chunk.get("files")
            if ctype not in CHUNK_TYPES:
                p.append(f"{at} has type {ctype!r}; supported: {list(CHUNK_TYPES)}")
            if not isinstance(features, list) or not features:
                p.append(f"{at} needs a non-empty list of features")
                continue
            if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
                p.append(f"{at} needs a non-empty list of file paths")
                continue
            for name in features:
                count[name] = count.get(name, 0) + 1
                if name not in self.feature_spec:
                    p.append(f"{at} names feature {name!r}, which is missing from feature_spec")
            if ctype == SPLIT_BINARY:
                p += self._split_binary_chunk_problems(at, features, files)
        for channel in CHANNELS:
            for name in self.channel_spec.get(channel) or []:
                if count.get(name, 0) == 0 and channel != MAP_CHANNEL:  # a mapping may lack the group id
                    p.append(f"{where} has no file for feature {name!r} (channel {channel})")
                elif count.get(name, 0) > 1:
                    p.append(f"{where} lists feature {name!r} in {count[name]} chunks")
        return p

    def _split_binary_chunk_problems(self, at: str, features: list, files: list) -> list[str]:
        p = []
        if len(files) != 1:
            p.append(f"{at}: a split_binary chunk has exactly one file, got {len(files)}")
        channels = {self.channel_of(name) for name in features}
        if len(channels) != 1:
            return p + [f"{at}: a split_binary chunk holds features of one channel, got {sorted(map(str, channels))}"]
        channel = channels.pop()
        if channel in ONE_FEATURE_PER_FILE and len(features) != 1:
            p.append(f"{at}: {channel} features are stored one per file (cat_<i>.bin / label.bin / group.bin)")
        if channel == NUMERICAL_CHANNEL:
            if features != self.numerical_names:
                p.append(f"{at}: the numerical file must hold all numerical features in channel order "
                         f"{self.numerical_names}, got {features}")
            dtypes = {self.dtype(name) for name in features if name in self.feature_spec}
            if len(dtypes) > 1:
                p.append(f"{at}: numerical features in one file must share a dtype, got {sorted(map(str, dtypes))}")
        return p

    def _file_problems(self, mapping: str) -> list[str]:
        chunks = self.source_spec[mapping]
        if all(chunk["type"] == SPLIT_BINARY for chunk in chunks):
            return file_problems(self, mapping)
        return [f"file {self.resolve(rel)} (features {chunk['features'][0]}..) does not exist"
                for chunk in chunks for rel in chunk["files"] if not os.path.isfile(self.resolve(rel))]


def file_problems(spec: FeatureSpec, mapping: str) -> list[str]:
    """Existence, record alignment and agreeing row counts of a split-binary mapping's files."""
    p: list[str] = []
    rows: list[tuple[BinaryChunk, int]] = []
    for chunk in spec._binary_chunks_unchecked(mapping):
        feature = chunk.features[0] if len(chunk.features) == 1 else f"{chunk.features[0]}..{chunk.features[-1]}"
        if not os.path.isfile(chunk.path):
            p.append(f"file {chunk.path} (feature {feature}) does not exist")
            continue
        size = os.path.getsize(chunk.path)
        if size % chunk.record_bytes:
            p.append(f"file {chunk.path} (feature {feature}) is truncated or wrong-sized: {size} bytes is not a "
                     f"whole number of {chunk.record_bytes}-byte records ({chunk.record_shape}); "
                     f"last full row {size // chunk.record_bytes - 1}")
            continue
        rows.append((chunk, size // chunk.record_bytes))
    expected_rows = (spec.metadata.get("num_rows") or {}).get(mapping)
    reference = "metadata.num_rows"
    if expected_rows is None:
        if not rows:
            return p
        expected_rows, reference = rows[0][1], f"file {rows[0][0].path}"
    for chunk, n in rows:
        if n != expected_rows:
            feature = chunk.features[0] if len(chunk.features) == 1 else f"{chunk.features[0]}..{chunk.features[-1]}"
            kind = "truncated" if n < expected_rows else "too long"
            p.append(f"file {chunk.path} (feature {feature}) has {n} rows but {reference} says {expected_rows} "
                     f"({kind}; row counts must agree across features)")
    return p

