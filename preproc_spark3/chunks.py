"""Output chunks: each split cut into consecutive pieces of its row order, one task writing each piece.

A split's order is (shuffle_key, day, line). Which chunk a row goes to depends on the row alone (never
on partitioning or cluster size), and chunk c of a split holds only rows that come before every row of
chunk c+1, so a split is the concatenation of its chunks and no global sort is needed:
- shuffled train: the top k bits of the signed 64-bit shuffle_key (2^k equal key ranges);
- train in input order: the row's position in (day, line) order, cut into equal line ranges;
- test / validation: the line number, cut into equal ranges.
Chunk ids are global: train's first, then test's, then validation's. Chunk counts follow the line
counts and `rows_per_chunk` (train's is a power of two, for the key ranges).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from preproc_spark3.config import SPLITS, TEST, VALIDATION, PreprocConfig


def first_half_lines(eval_day_lines: int) -> int:
    """Lines of the evaluation day that go to `test` (its first half; the larger one when N is odd)."""
    return (eval_day_lines + 1) // 2


def _power_of_two_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class ChunkLayout:
    """How many chunks each split has and which lines each split covers."""

    counts: tuple[int, int, int]  # chunks of train, test, validation
    train_day_lines: tuple[tuple[int, int], ...]  # (day, raw lines) of the training days, in day order
    test_lines: int  # raw lines 1..test_lines of the evaluation day
    eval_lines: int  # raw lines of the evaluation day

    @property
    def train_lines(self) -> int:
        return sum(lines for _, lines in self.train_day_lines)

    def first(self, split: str) -> int:
        """Global id of the split's first chunk."""
        return sum(self.counts[:SPLITS.index(split)])

    def chunk_ids(self, split: str) -> range:
        start = self.first(split)
        return range(start, start + self.counts[SPLITS.index(split)])

    def split_of(self, chunk: int) -> tuple[str, int]:
        """(split, index within the split) of a global chunk id."""
        for split in SPLITS:
            if chunk in self.chunk_ids(split):
                return split, chunk - self.first(split)
        raise ValueError(f"chunk {chunk} is outside the layout {self.counts}")


def chunk_layout(config: PreprocConfig, lines_per_day: dict[int, int]) -> ChunkLayout:
    train_day_lines = tuple((d, lines_per_day[d]) for d in sorted(config.train_days))
    train_lines = sum(lines for _, lines in train_day_lines)
    eval_lines = lines_per_day[config.eval_day]
    test_lines = first_half_lines(eval_lines)

    def pieces(lines: int) -> int:
        return max(1, -(-lines // config.rows_per_chunk))

    counts = (_power_of_two_at_least(pieces(train_lines)), pieces(test_lines), pieces(eval_lines - test_lines))
    return ChunkLayout(counts, train_day_lines, test_lines, eval_lines)


def chunk_ids(layout: ChunkLayout, config: PreprocConfig, day: np.ndarray, line: np.ndarray,
              shuffle_key: np.ndarray) -> np.ndarray:
    """The global chunk id (int64) of each row, from its day, line and shuffle_key."""
    day, line = np.asarray(day, dtype=np.int64), np.asarray(line, dtype=np.int64)
    n_train, n_test, n_validation = layout.counts
    chunk = np.empty(len(line), dtype=np.int64)
    train = day != config.eval_day
    if config.shuffle and n_train > 1:
        bits = n_train.bit_length() - 1  # arithmetic shift: chunks ordered like the key
        chunk[train] = (np.asarray(shuffle_key)[train] >> (64 - bits)) + n_train // 2
    else:
        offsets = np.zeros(max(d for d, _ in layout.train_day_lines) + 1, dtype=np.int64)
        start = 0
        for d, lines in layout.train_day_lines:  # position of (day, line) in input order
            offsets[d], start = start, start + lines
        position = offsets[day[train]] + line[train] - 1
        chunk[train] = position * n_train // max(1, layout.train_lines)
    test = ~train & (line <= layout.test_lines)
    validation = ~train & ~test
    chunk[test] = (line[test] - 1) * n_test // max(1, layout.test_lines) + layout.first(TEST)
    chunk[validation] = ((line[validation] - layout.test_lines - 1) * n_validation
                         // max(1, layout.eval_lines - layout.test_lines) + layout.first(VALIDATION))
    return chunk
