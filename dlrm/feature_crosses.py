"""Crossed features of the Wide & Deep wide part (TF1 Wide & Deep's hashed crossed columns).

Pure Python, beside the feature contract: the synthetic generator names its pairs, the planner and the logs
list the tables, and the model computes the ids (`dlrm.model.cross_ids`) from this one definition.

`--wide_crosses A:B` gives the wide part one more dim-1, zero-start table, `A_x_B_wide`, holding one
weight per pair of ids of two one-hot features: a linear model then learns an effect of each (a, b)
pair, which neither feature's own weights can express. The cross ids are computed from the batch's id
columns before the embedding lookup (`dlrm.model.cross_ids.embedding_ids`: the only place the model's
embedding layer gets its ids), so every path (training, evaluation, prediction, the exported serving
signature, the hybrid-parallel exchange of N ranks) sees them as one more id column.

Cross id of ids (a, b) of features with cardinalities (card_a, card_b), with N = `--wide_cross_buckets`:
- card_a * card_b <= N: exactly a * card_b + b (the table has card_a * card_b rows, no collisions);
- else the table has N rows and the id is `((k mod P) * M + C) mod P mod N` of k = a * card_b + b, with
  P = 2^31 - 1 (prime), M and C fixed: int64 arithmetic that never overflows, the same on every rank
  and in every runtime. The affine map is a bijection of [0, P), so pairs collide (share a weight) only
  through the final `mod N`: about as often as with a random hash (a share ~ pairs / N of the pairs
  in use), and keys that differ by a multiple of P (products beyond 2^31) map alike.
A cross of A and B and one of B and A are different tables (their ids differ); the CLI refuses a list
holding both (the same pairs twice).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

from dlrm.features import FeatureContract

CROSS_SEPARATOR = "_x_"
HASH_PRIME = 2**31 - 1
HASH_MULTIPLIER = 1_580_030_168  # large: consecutive keys land far apart
HASH_OFFSET = 1_029_384_756


@dataclass(frozen=True)
class Cross:
    """One crossed feature: the two one-hot features' names, id columns and cardinalities, and its rows."""

    first: str
    second: str
    first_column: int
    second_column: int
    first_rows: int
    second_rows: int
    buckets: int

    @property
    def exact(self) -> bool:
        """Every pair has its own row (the product of the cardinalities fits in the buckets)."""
        return self.first_rows * self.second_rows <= self.buckets

    @property
    def rows(self) -> int:
        return self.first_rows * self.second_rows if self.exact else self.buckets

    @property
    def name(self) -> str:
        return cross_name(self.first, self.second)


def cross_name(first: str, second: str) -> str:
    """The cross's feature name (its wide table adds the wide suffix)."""
    return f"{first}{CROSS_SEPARATOR}{second}"


def contract_crosses(pairs: Sequence[Tuple[str, str]], buckets: int, contract: FeatureContract) -> Tuple[Cross, ...]:
    """The crosses of `pairs` (names of one-hot features of `contract`; checked by `cross_problems`)."""
    found = []
    for first, second in pairs:
        a, b = contract.index(first), contract.index(second)
        found.append(Cross(first, second, contract.id_columns(a)[0], contract.id_columns(b)[0],
                           contract.tables[a].rows, contract.tables[b].rows, int(buckets)))
    return tuple(found)


def cross_problems(pairs: Sequence[Tuple[str, str]], contract: FeatureContract) -> list[str]:
    """Why these pairs cannot be crossed with this dataset's features (empty if they can)."""
    found = []
    names = contract.table_names
    for first, second in pairs:
        for name in (first, second):
            if name not in names:
                found.append(f"--wide_crosses {first}:{second}: the dataset has no categorical feature {name!r} "
                             f"(it has {', '.join(names)})")
            else:
                table = contract.tables[contract.index(name)]
                if table.multi_hot or table.hotness != 1:
                    found.append(f"--wide_crosses {first}:{second}: {name!r} is multi-hot (hotness "
                                 f"{table.hotness}); only one-hot features can be crossed")
    return found


def cross_key(a: int, b: int, cross: Cross) -> int:
    """The cross id of ids (a, b) in Python integers: what `dlrm.model.cross_ids` computes in a batch."""
    key = a * cross.second_rows + b
    if cross.exact:
        return key
    return ((key % HASH_PRIME) * HASH_MULTIPLIER + HASH_OFFSET) % HASH_PRIME % cross.buckets
