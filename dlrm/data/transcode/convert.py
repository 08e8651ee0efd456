"""Headerless CSV or parquet described by a feature spec -> split-binary dataset ("bring your own data").

Parquet in NVIDIA's Wide & Deep layout (`parquet` chunks, one column per feature, list columns for
multi-hot features, `map` feature allowed in test only) is read by `dlrm.data.transcode.parquet_input`; the
rest of this docstring is about CSV. Both go through the same writer and error re-statement.

The input spec lists, per mapping, one `csv` chunk holding every feature in column order; its files
are concatenated row-wise. Values must already be model-ready: label 0/1, numericals as numbers
(stored as float16), one-hot categoricals as integer ids in [0, cardinality), multi-hot ones as a
bracketed list of such ids, `[3,17,5]` (`[]`: an empty bag; at most `max_hotness` ids; quoted,
`"[3,17,5]"`, when the delimiter is a comma), the `map` group id as an integer. Files are read in chunks
(pandas' C parser), so memory stays bounded. Any bad field (empty, not a number, non-integer or
out-of-range id, a list longer than max_hotness, label not 0/1, NaN/inf, too many or too few fields)
stops the run with an error naming the CSV file, its line and the feature, and so does an empty CSV
file; nothing is published (the writer renames files only on success).
"""
from __future__ import annotations

import csv
import itertools
import os
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from dlrm.data.format.errors import DataError, SpecError
from dlrm.data.format.feature_spec import SPEC_FILE_NAME, FeatureSpec
from dlrm.data.format.spec_rules import (
    CATEGORICAL_CHANNELS,
    CSV,
    LABEL_CHANNEL,
    MAP_CHANNEL,
    NUMERICAL_CHANNEL,
    categorical_dtype,
)
from dlrm.data.format.writer import SplitBinaryWriter
from dlrm.data.transcode.parquet_input import ParquetColumns, is_parquet_spec, row_batches, spec_problems
from dlrm.features import PADDING_ID

DEFAULT_CHUNK_ROWS = 1 << 18


def output_spec(input_spec: FeatureSpec) -> FeatureSpec:
    """The split-binary spec for the same features and mappings (metadata, per-feature embedding dims and
    combiners and the group id's dtype carried over)."""
    cards = dict(zip(input_spec.categorical_names, input_spec.cardinalities))
    onehot = {name: cards[name] for name in input_spec.onehot_names}
    multi_hot = {name: (cards[name], hotness) for name, hotness in input_spec.max_hotness.items()}
    spec = FeatureSpec.split_binary(input_spec.label_name, input_spec.numerical_names, onehot, input_spec.mappings,
                                    metadata=dict(input_spec.metadata), multi_hot=multi_hot,
                                    group=input_spec.group_name)
    carried: list[tuple[str, tuple[str, ...]]] = [(name, ("embedding_dim", "combiner"))
                                                  for name in input_spec.categorical_names]
    carried += [(input_spec.group_name, ("dtype",))] if input_spec.group_name else []
    for name, keys in carried:
        spec.feature_spec[name].update({k: v for k, v in input_spec.feature_spec[name].items() if k in keys})
    if input_spec.group_name and str(spec.feature_spec[input_spec.group_name]["dtype"]) not in ("int32", "int64"):
        spec.feature_spec[input_spec.group_name]["dtype"] = "int64"  # e.g. no dtype in the input
    for mapping in spec.source_spec:  # the group id may be missing from a mapping (e.g. train)
        if not _has_group(input_spec, mapping):
            spec.source_spec[mapping] = [c for c in spec.source_spec[mapping]
                                         if c["features"] != [input_spec.group_name]]
    return spec


def _has_group(spec: FeatureSpec, mapping: str) -> bool:
    return spec.group_name is not None and any(spec.group_name in chunk["features"]
                                               for chunk in spec.source_spec[mapping])


def _csv_chunk(spec: FeatureSpec, mapping: str) -> dict:
    chunks = spec.source_spec[mapping]
    if len(chunks) != 1 or chunks[0]["type"] != CSV:
        raise SpecError([f"source_spec.{mapping}: transcode reads exactly one '{CSV}' chunk holding every "
                         f"feature (column order = its feature list), got {len(chunks)} chunk(s)"],
                        spec._spec_path())
    return chunks[0]


class _ColumnRoles:
    """Where each channel's features sit among the CSV columns: the numbers (label, numerical, one-hot ids,
    read as float64) and the text fields (multi-hot lists and the group id, parsed here)."""

    def __init__(self, spec: FeatureSpec, columns: list[str]):
        self.columns = columns
        self.group = spec.group_name if spec.group_name in columns else None  # a mapping may lack it
        self.text = spec.multihot_names + ([self.group] if self.group else [])
        self.numbers = [name for name in columns if name not in self.text]
        position = {name: i for i, name in enumerate(self.numbers)}
        self.label = position[spec.label_name]
        self.numerical = [position[n] for n in spec.numerical_names]
        self.categorical = [position[n] for n in spec.onehot_names]
        self.max_hotness = spec.max_hotness


def _check_block(values: np.ndarray, roles: _ColumnRoles, path: str, first_line: int) -> None:
    """Raise DataError for what only the CSV can get wrong: an empty field, or an id that is not a
    whole number (float64 [rows, columns] block). Labels, numericals and id ranges are checked by the
    writer; `_at_csv_line` re-states its errors at the CSV line."""
    def first_bad(mask: np.ndarray) -> Optional[tuple[int, int]]:
        rows, cols = np.nonzero(mask)
        return (int(rows[0]), int(cols[0])) if rows.size else None  # row-major order: first row, then column

    hit = first_bad(np.isnan(values))
    if hit:
        line = first_line + hit[0]
        raise DataError(f"(line {line}) empty or missing field", path, roles.numbers[hit[1]], line - 1)
    ids = values[:, roles.categorical]
    hit = first_bad((ids != np.floor(ids)) | (np.abs(ids) >= 2**31))
    if hit:
        line = first_line + hit[0]
        raise DataError(f"(line {line}) id {ids[hit]:g} is not a whole number below 2^31", path,
                        roles.numbers[roles.categorical[hit[1]]], line - 1)


def _parse_bags(texts: np.ndarray, hotness: int, path: str, feature: str, first_line: int) -> np.ndarray:
    """Bracketed id lists ("[3,17,5]", "[]") -> ids [rows, hotness], -1 padded; errors name the line."""
    bags = np.full((texts.shape[0], hotness), PADDING_ID, np.int64)
    for r, text in enumerate(texts):
        line = first_line + r
        if not isinstance(text, str) or not text.strip():
            raise DataError(f"(line {line}) empty or missing field", path, feature, line - 1)
        inner = text.strip()
        try:
            if not (inner.startswith("[") and inner.endswith("]")):
                raise ValueError(text)
            ids = [int(part) for part in inner[1:-1].split(",")] if inner[1:-1].strip() else []
        except ValueError:
            raise DataError(f"(line {line}) {text!r} is not a bracketed list of integer ids like [3,17,5] "
                            f"(quote it when the delimiter is a comma)", path, feature, line - 1) from None
        if len(ids) > hotness:
            raise DataError(f"(line {line}) {len(ids)} ids is more than max_hotness {hotness}", path, feature,
                            line - 1)
        outside = [i for i in ids if not 0 <= i <= np.iinfo(np.int32).max]
        if outside:
            raise DataError(f"(line {line}) id {outside[0]} is outside [0, cardinality)", path, feature, line - 1)
        bags[r, :len(ids)] = ids
    return bags


def _parse_group(texts: np.ndarray, path: str, feature: str, first_line: int) -> np.ndarray:
    """Integer group ids (the map channel) -> int64 [rows]; errors name the line."""
    out = np.empty(texts.shape[0], np.int64)
    for r, text in enumerate(texts):
        try:
            out[r] = int(text)
        except (TypeError, ValueError, OverflowError):
            line = first_line + r
            why = "empty or missing field" if not isinstance(text, str) else f"{text!r} is not an integer group id"
            raise DataError(f"(line {line}) {why}", path, feature, line - 1) from None
    return out


def _block_arrays(block: pd.DataFrame, roles: _ColumnRoles, path: str, first_line: int) -> tuple:
    """The writer's (label, numerical, categorical tables, group) of one block of CSV lines (first line
    number `first_line`), after the checks only the CSV can fail."""
    values = block[roles.numbers].to_numpy(dtype=np.float64)
    _check_block(values, roles, path, first_line)
    tables = [values[:, j].astype(np.int64) for j in roles.categorical]
    tables += [_parse_bags(block[name].to_numpy(), hotness, path, name, first_line)
               for name, hotness in roles.max_hotness.items()]
    group = None if roles.group is None else _parse_group(block[roles.group].to_numpy(), path, roles.group,
                                                           first_line)
    return values[:, roles.label], values[:, roles.numerical], tables, group


def at_source_row(error: DataError, path: str, rows_before_file: int, lines: bool) -> DataError:
    """A writer error (row = output row of the mapping) re-stated at the input file's own line (CSV,
    `lines`) or row (parquet, 0-based)."""
    if error.row is None:
        return error
    row = error.row - rows_before_file
    message = f"(line {row + 1}) {error.message}" if lines else error.message
    return DataError(message, path, error.feature, row)


def write_rows(writer: SplitBinaryWriter, arrays: tuple, path: str, rows_before_file: int, lines: bool) -> None:
    """Append one block of an input file; the writer's checks (labels, numericals, id ranges, bags) are the
    same for every producer, their errors re-stated at the input file's line or row."""
    try:
        writer.write(*arrays)
    except DataError as error:
        raise at_source_row(error, path, rows_before_file, lines) from None


def _diagnose(path: str, first_line: int, roles: _ColumnRoles, delimiter: str, error: Exception) -> DataError:
    """Find the field pandas could not parse, reading the block's lines one by one (error path only)."""
    with open(path, newline="", encoding="utf-8") as f:
        lines = itertools.islice(f, first_line - 1, None)
        for line_number, fields in enumerate(csv.reader(lines, delimiter=delimiter), start=first_line):
            if len(fields) != len(roles.columns):
                return DataError(f"(line {line_number}) has {len(fields)} fields, expected {len(roles.columns)}",
                                 path, None, line_number - 1)
            for name, text in zip(roles.columns, fields):
                if name in roles.text:
                    continue
                try:
                    float(text)
                except ValueError:
                    return DataError(f"(line {line_number}) {text!r} is not a number", path, name, line_number - 1)
    return DataError(f"could not be parsed: {error}", path)


def transcode_mapping(input_spec: FeatureSpec, out_dir: str, out_spec: FeatureSpec, mapping: str,
                      chunk_rows: int = DEFAULT_CHUNK_ROWS, delimiter: str = ",") -> int:
    """Convert one mapping; returns its row count."""
    chunk = _csv_chunk(input_spec, mapping)
    roles = _ColumnRoles(input_spec, list(chunk["features"]))
    with SplitBinaryWriter(out_dir, out_spec, mapping) as writer:
        for relative in chunk["files"]:
            path = input_spec.resolve(relative)
            first_line = 1
            rows_before_file = writer.rows_written
            dtypes = {name: (object if name in roles.text else np.float64) for name in roles.columns}
            reader = pd.read_csv(path, header=None, sep=delimiter, dtype=dtypes, chunksize=chunk_rows,
                                 skip_blank_lines=False, engine="c", names=roles.columns, index_col=False)
            blocks = iter(reader)
            while True:
                try:
                    block = next(blocks)
                except StopIteration:
                    break
                except (ValueError, pd.errors.ParserError) as error:
                    raise _diagnose(path, first_line, roles, delimiter, error) from None
                write_rows(writer, _block_arrays(block, roles, path, first_line), path, rows_before_file, lines=True)
                first_line += block.shape[0]
            if writer.rows_written == rows_before_file:
                raise DataError(f"the CSV file is empty: no rows for mapping {mapping!r} (fill it, or remove it "
                                f"from source_spec.{mapping})", path)
    return writer.rows_written


def transcode_parquet_mapping(input_spec: FeatureSpec, out_dir: str, out_spec: FeatureSpec, mapping: str,
                              chunk_rows: int = DEFAULT_CHUNK_ROWS) -> int:
    """Convert one mapping of a parquet dataset, `chunk_rows` rows at a time; returns its row count."""
    chunk = input_spec.source_spec[mapping][0]
    columns = ParquetColumns(input_spec, list(chunk["features"]))
    with SplitBinaryWriter(out_dir, out_spec, mapping) as writer:
        for relative in chunk["files"]:
            path = input_spec.resolve(relative)
            rows_before_file = writer.rows_written
            for _, arrays in row_batches(path, columns, chunk_rows):
                write_rows(writer, arrays, path, rows_before_file, lines=False)
        if writer.rows_written == 0:
            raise DataError(f"the parquet files of mapping {mapping!r} hold no rows", input_spec.resolve(
                chunk["files"][0]))
    return writer.rows_written


def with_chosen_dtypes(spec: FeatureSpec) -> FeatureSpec:
    """A CSV spec with a dtype for each feature that has none, as NVIDIA's bring-your-own specs leave them out
    (their transcoders choose). The choice is what the split-binary output stores (`output_spec`): bool labels,
    float16 numericals (NVIDIA's split-binary layout; CTR features are normalised counts, and the reader
    widens them), the smallest of int8/int16/int32 holding each cardinality, int64 group ids."""
    chosen = {LABEL_CHANNEL: "bool", NUMERICAL_CHANNEL: "float16", MAP_CHANNEL: "int64"}
    for channel, names in spec.channel_spec.items():
        for name in names if isinstance(names, list) else []:
            info = spec.feature_spec.get(name)
            if not isinstance(info, dict) or "dtype" in info:
                continue
            if channel in CATEGORICAL_CHANNELS:
                cardinality = info.get("cardinality")
                try:
                    if isinstance(cardinality, int) and not isinstance(cardinality, bool) and cardinality >= 1:
                        info["dtype"] = categorical_dtype(cardinality).name
                except ValueError:  # beyond int32 ids: the spec check names it
                    pass
            elif channel in chosen:
                info["dtype"] = chosen[channel]
    return spec


def load_input_spec(path: str) -> FeatureSpec:
    """The input spec, checked by the rules of its format (CSV: the project's, dtypes chosen where the spec
    gives none; parquet: NVIDIA's BYO rules) and its files' existence; every problem in one error."""
    spec = FeatureSpec.load(path)
    if not is_parquet_spec(spec):
        return with_chosen_dtypes(spec).validate(check_files=True)
    problems = spec_problems(spec)
    if not problems:
        paths = [(m, spec.resolve(f)) for m in spec.mappings for f in spec.source_spec[m][0]["files"]]
        problems = [f"file {path} (mapping {m}) does not exist" for m, path in paths if not os.path.isfile(path)]
    if problems:
        raise SpecError(problems, os.path.join(path, SPEC_FILE_NAME) if os.path.isdir(path) else path)
    return spec


def transcode(input_spec_path: str, out_dir: str, chunk_rows: int = DEFAULT_CHUNK_ROWS, delimiter: str = ",",
              mappings: Optional[Sequence[str]] = None) -> FeatureSpec:
    """Transcode every (or the given) mapping and write `out_dir/feature_spec.yaml`."""
    input_spec = load_input_spec(input_spec_path)
    parquet = is_parquet_spec(input_spec)
    out_spec = output_spec(input_spec)
    os.makedirs(out_dir, exist_ok=True)
    rows = {}
    for mapping in mappings or input_spec.mappings:
        rows[mapping] = (transcode_parquet_mapping(input_spec, out_dir, out_spec, mapping, chunk_rows) if parquet
                         else transcode_mapping(input_spec, out_dir, out_spec, mapping, chunk_rows, delimiter))
    out_spec.source_spec = {m: out_spec.source_spec[m] for m in rows}
    out_spec.metadata["num_rows"] = rows
    out_spec.metadata["transcoded_from"] = os.path.abspath(input_spec_path)
    out_spec.save(out_dir)
    return out_spec.validate()
