"""Dataset description (`feature_spec.yaml`), same concepts as NVIDIA's "BYO dataset" feature spec.

Four sections:
- `feature_spec`: per feature its `dtype` and, for categorical features, `cardinality`;
- `source_spec`: per mapping (`train`, `test`) a list of chunks `{type, features, files}`;
- `channel_spec`: which features are the `label`, the `numerical` and the `categorical` inputs;
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

from dlrm.atomic import write_text_atomically
from dlrm.data.errors import SpecError

SPEC_FILE_NAME = "feature_spec.yaml"
LABEL_CHANNEL = "label"
NUMERICAL_CHANNEL = "numerical"
CATEGORICAL_CHANNEL = "categorical"
CHANNELS = (LABEL_CHANNEL, NUMERICAL_CHANNEL, CATEGORICAL_CHANNEL)
SPLIT_BINARY = "split_binary"
CSV = "csv"
CHUNK_TYPES = (SPLIT_BINARY, CSV)

_CATEGORICAL_DTYPES = (np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32))
_NUMERICAL_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))


def categorical_dtype(cardinality: int) -> np.dtype:
    """Smallest of int8/int16/int32 holding ids 0 .. cardinality-1."""
    for dtype in _CATEGORICAL_DTYPES:
        if cardinality - 1 <= np.iinfo(dtype).max:
            return dtype
    raise ValueError(f"cardinality {cardinality} does not fit int32 ids")


@dataclass(frozen=True)
class BinaryChunk:
    """One split-binary file: fixed-size records of `len(features)` values of `dtype`."""

    path: str  # absolute
    channel: str
    features: tuple[str, ...]
    dtype: np.dtype

    @property
    def record_bytes(self) -> int:
        return self.dtype.itemsize * len(self.features)


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
                    metadata: Optional[dict] = None) -> "FeatureSpec":
        """Split-binary spec shaped like preprocessed Criteo: `label`, `num_0..`, `cat_0..` features."""
        return cls.split_binary("label", [f"num_{i}" for i in range(num_numerical)],
                                {f"cat_{i}": int(c) for i, c in enumerate(cardinalities)}, mappings,
                                base_directory, metadata)

    @classmethod
    def split_binary(cls, label: str, numerical: Sequence[str], categorical: dict,
                     mappings: Sequence[str] = ("train", "test"), base_directory: Optional[str] = None,
                     metadata: Optional[dict] = None) -> "FeatureSpec":
        """Split-binary spec for the given feature names (`categorical`: name -> cardinality, in order).

        Files per mapping: `<mapping>/label.bin`, `<mapping>/numerical.bin` (float16, all numerical
        features row-major) and `<mapping>/cat_<i>.bin` for the i-th categorical feature.
        """
        features: dict = {label: {"dtype": "bool"}}
        features.update({name: {"dtype": "float16"} for name in numerical})
        for name, card in categorical.items():
            features[name] = {"dtype": categorical_dtype(int(card)).name, "cardinality": int(card)}
        source: dict = {}
        for mapping in mappings:
            chunks = [{"type": SPLIT_BINARY, "features": [label], "files": [f"{mapping}/label.bin"]}]
            if numerical:
                chunks.append({"type": SPLIT_BINARY, "features": list(numerical),
                               "files": [f"{mapping}/numerical.bin"]})
            chunks += [{"type": SPLIT_BINARY, "features": [name], "files": [f"{mapping}/cat_{i}.bin"]}
                       for i, name in enumerate(categorical)]
            source[mapping] = chunks
        channels = {LABEL_CHANNEL: [label], NUMERICAL_CHANNEL: list(numerical),
                    CATEGORICAL_CHANNEL: list(categorical)}
        return cls(features, source, channels, dict(metadata or {}), base_directory)

    @classmethod
    def load(cls, path: str) -> "FeatureSpec":
        """Read a spec from a yaml file or from a dataset directory holding `feature_spec.yaml`."""
        if os.path.isdir(path):
            path = os.path.join(path, SPEC_FILE_NAME)
        try:
            with open(path, encoding="utf-8") as f:
                raw = yaml.safe_load(f)
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
    def categorical_names(self) -> list[str]:
        return list(self.channel_spec.get(CATEGORICAL_CHANNEL) or [])

    @property
    def cardinalities(self) -> list[int]:
        """Table sizes in categorical channel order."""
        return [int(self.feature_spec[name]["cardinality"]) for name in self.categorical_names]

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
        order = ([(self.label_name, LABEL_CHANNEL)] + [(name, NUMERICAL_CHANNEL) for name in self.numerical_names[:1]]
                 + [(name, CATEGORICAL_CHANNEL) for name in self.categorical_names])
        chunks = []
        for first, channel in order:
            raw = by_first_feature[first]
            chunks.append(BinaryChunk(self.resolve(raw["files"][0]), channel, tuple(raw["features"]),
                                      self.dtype(first)))
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
        p: list[str] = []
        if not isinstance(self.feature_spec, dict) or not self.feature_spec:
            return ["feature_spec must be a non-empty mapping of feature name -> {dtype, cardinality}"]
        if not isinstance(self.channel_spec, dict):
            return ["channel_spec must be a mapping of channel -> list of features"]
        if not isinstance(self.source_spec, dict) or not self.source_spec:
            return ["source_spec must be a non-empty mapping of mapping name -> list of chunks"]
        for channel in self.channel_spec:
            if channel not in CHANNELS:
                p.append(f"channel_spec has unknown channel {channel!r} (known: {list(CHANNELS)})")
        labels = self.channel_spec.get(LABEL_CHANNEL)
        if not isinstance(labels, list) or len(labels) != 1:
            p.append(f"channel_spec.{LABEL_CHANNEL} must list exactly one feature, got {labels!r}")
        seen: dict[str, str] = {}
        for channel in CHANNELS:
            names = self.channel_spec.get(channel) or []
            if not isinstance(names, list):
                p.append(f"channel_spec.{channel} must be a list of feature names")
                continue
            for name in names:
                if name in seen:
                    p.append(f"feature {name!r} is in channel {seen[name]!r} and again in {channel!r}")
                seen[name] = channel
                if name not in self.feature_spec:
                    p.append(f"channel_spec.{channel} names feature {name!r}, which is missing from feature_spec")
        for name, info in self.feature_spec.items():
            if name not in seen:
                p.append(f"feature {name!r} is in feature_spec but in no channel of channel_spec")
            p += self._feature_problems(name, info, seen.get(name))
        return p

    @staticmethod
    def _feature_problems(name: str, info, channel: Optional[str]) -> list[str]:
        if not isinstance(info, dict) or "dtype" not in info:
            return [f"feature {name!r} needs a dtype"]
        try:
            dtype = np.dtype(info["dtype"])
        except TypeError:
            return [f"feature {name!r} has unknown dtype {info['dtype']!r}"]
        if channel == CATEGORICAL_CHANNEL:
            card = info.get("cardinality")
            if not isinstance(card, int) or card < 1:
                return [f"categorical feature {name!r} needs an integer cardinality >= 1, got {card!r}"]
            if dtype not in _CATEGORICAL_DTYPES:
                return [f"categorical feature {name!r} has dtype {dtype.name}; use int8, int16 or int32"]
            if card - 1 > np.iinfo(dtype).max:
                return [f"categorical feature {name!r}: dtype {dtype.name} cannot hold ids up to {card - 1}"]
        elif channel == NUMERICAL_CHANNEL and dtype not in _NUMERICAL_DTYPES:
            return [f"numerical feature {name!r} has dtype {dtype.name}; use float16 or float32"]
        elif channel == LABEL_CHANNEL and dtype != np.dtype(bool):
            return [f"label feature {name!r} has dtype {dtype.name}; use bool"]
        return []

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
                if count.get(name, 0) == 0:
                    p.append(f"{where} has no file for feature {name!r} (channel {channel})")
                elif count[name] > 1:
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
        if channel in (LABEL_CHANNEL, CATEGORICAL_CHANNEL) and len(features) != 1:
            p.append(f"{at}: {channel} features are stored one per file (cat_<i>.bin / label.bin)")
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
                     f"whole number of {chunk.record_bytes}-byte records ({len(chunk.features)} x {chunk.dtype.name}); "
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
