"""The map side of the job's one shuffle: each task parses one input split and sends compact blobs.

Per split (one task each): read its lines block by block, parse them (validate.parse_lines), number
them from the split's first line (known from the count job), and compute per well-formed row, in
numpy, its shuffle key (Spark's xxhash64, preproc_spark3.shuffle_key), its output chunk
(chunks.chunk_ids), the transformed numericals and the label. Categorical values stay raw (ids need
the dictionary, which needs every task's counts). The task emits (partition, blob) records:
- partition 0: the split's malformed lines (day, line, file, kind, reason, raw line);
- partition 1 + f: the (value, count) pairs of feature f over the split's dictionary-day rows;
- partition 1 + 26 + c: the split's rows of output chunk c (CHUNK_COLUMNS; categoricals packed), one blob
  per FLUSH_ROWS rows parsed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from preproc_spark3.chunks import ChunkLayout, chunk_ids
from preproc_spark3.config import CATEGORICAL_COLUMNS, PreprocConfig
from preproc_spark3.dictionary import ValueCounter
from preproc_spark3.raw_input import InputSplit, line_blocks, lines_array
from preproc_spark3.shuffle_key import shuffle_keys
from preproc_spark3.validate import parse_lines

QUARANTINE_PARTITION = 0
FLUSH_ROWS = 262_144  # a task sends its rows at least this often (one blob per chunk): bounded memory
CHUNK_COLUMNS = ("shuffle_key", "day", "line", "label", "numerical", "categorical", "missing")


def pack_categorical(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 [n, 26] values (negative = missing) -> (uint32 values, packed missing bits): 108 bytes a row
    through the shuffle instead of 208."""
    return values.astype(np.uint32), np.packbits(values < 0, axis=1)


def unpack_categorical(values: np.ndarray, missing: np.ndarray) -> np.ndarray:
    """The inverse of pack_categorical: int64 [n, 26], missing -> -1."""
    unpacked = values.astype(np.int64)
    unpacked[np.unpackbits(missing, axis=1, count=values.shape[1]).astype(bool)] = -1
    return unpacked


@dataclass(frozen=True)
class Partitions:
    """Shuffle partitions: [quarantine] + [one per feature] + [one per output chunk]."""

    chunks: int

    @staticmethod
    def feature(index: int) -> int:
        return 1 + index

    @staticmethod
    def chunk(chunk: int) -> int:
        return 1 + len(CATEGORICAL_COLUMNS) + chunk

    @property
    def small(self) -> list[int]:
        """The quarantine and dictionary partitions."""
        return [QUARANTINE_PARTITION, *(self.feature(i) for i in range(len(CATEGORICAL_COLUMNS)))]

    @property
    def chunk_partitions(self) -> list[int]:
        return [self.chunk(c) for c in range(self.chunks)]

    @property
    def total(self) -> int:
        return 1 + len(CATEGORICAL_COLUMNS) + self.chunks


def transform_numericals(integers: np.ndarray, log_offset: float) -> np.ndarray:
    """Missing (0) or negative -> 0, then log(x + offset) in float64, stored as float32."""
    return np.log(np.maximum(integers, 0).astype(np.float64) + float(log_offset)).astype(np.float32)


def _by_chunk(parts: list[tuple[np.ndarray, dict[str, np.ndarray]]]) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """Blocks' rows (chunk ids, columns) -> one blob per destination chunk."""
    if not parts:
        return
    chunk = np.concatenate([c for c, _ in parts])
    columns = {name: np.concatenate([p[name] for _, p in parts]) for name in CHUNK_COLUMNS}
    order = np.argsort(chunk, kind="stable")
    chunk = chunk[order]
    cuts = [0, *(np.flatnonzero(chunk[1:] != chunk[:-1]) + 1).tolist(), len(chunk)]
    for a, b in zip(cuts[:-1], cuts[1:]):
        rows = order[a:b]
        yield Partitions.chunk(int(chunk[a])), {name: values[rows] for name, values in columns.items()}


@dataclass(frozen=True)
class ParseJob:
    """What every parse task needs (shipped once with the task closure)."""

    config: PreprocConfig
    layout: ChunkLayout
    first_lines: tuple[int, ...]  # per split index: the 1-based line number of its first line

    def run(self, split: InputSplit, runs: Any = None) -> Iterator[tuple[int, Any]]:
        """The (partition, blob) records of one split; `runs`: an accumulator counting task runs."""
        if runs is not None:
            runs.add(1)
        config = self.config
        counts_values = split.day in config.dictionary_days
        train = split.day != config.eval_day
        counter = ValueCounter()
        bad: dict[str, list] = {"line": [], "kind": [], "reason": [], "raw_line": []}
        next_line = self.first_lines[split.index]
        pending: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []  # rows not sent yet, per block
        pending_rows = 0
        for block in line_blocks(split):
            lines = lines_array(block)
            parsed = parse_lines(lines)
            numbers = np.arange(next_line, next_line + len(lines), dtype=np.int64)
            next_line += len(lines)
            if len(parsed.bad_rows):
                bad["line"].append(numbers[parsed.bad_rows])
                bad["kind"] += parsed.kinds
                bad["reason"] += parsed.reasons
                bad["raw_line"] += [lines[int(i)].as_py() for i in parsed.bad_rows]
            line = numbers[parsed.good]
            if not len(line):
                continue
            if counts_values:
                counter.add(parsed.categorical)
            day = np.full(len(line), split.day, dtype=np.int32)
            key = (shuffle_keys(config.seed, day, line) if config.shuffle and train
                   else np.zeros(len(line), dtype=np.int64))
            chunk = chunk_ids(self.layout, config, day, line, key)
            values, missing = pack_categorical(parsed.categorical)
            columns = {"shuffle_key": key, "day": day, "line": line, "label": parsed.label.astype(np.float32),
                       "numerical": transform_numericals(parsed.integers, config.log_offset),
                       "categorical": values, "missing": missing}
            pending.append((chunk, columns))
            pending_rows += len(chunk)
            if pending_rows >= FLUSH_ROWS:
                yield from _by_chunk(pending)
                pending, pending_rows = [], 0
        yield from _by_chunk(pending)
        yield QUARANTINE_PARTITION, {"day": split.day, "file": split.file_name,
                                     "line": np.concatenate(bad["line"]) if bad["line"] else np.zeros(0, np.int64),
                                     "kind": bad["kind"], "reason": bad["reason"], "raw_line": bad["raw_line"]}
        for index in range(len(CATEGORICAL_COLUMNS)):
            yield Partitions.feature(index), counter.counts(index)
