"""Start-up checks of every value of every mapping a run reads, each rank checking a share of the rows.

Opening a reader checks the spec and the files' structure; the values (labels 0/1, finite
numericals, ids in [0, cardinality), multi-hot rows padded with -1 only at their end) are otherwise
checked only as batches are decoded, so a bad row
in the test mapping would surface at the evaluation, after the training. `check_mappings` checks
them all before step 1: each of N ranks checks a contiguous 1/N of every mapping's rows with the
compiled kernels (`decode.check_rows`, no decode, on several threads), the ranks exchange what they
found through the `gather` collective they are given (this package does not talk to Horovod), and
every rank raises the same DataError, naming the file, the feature and the earliest bad row.

Also refused, whatever `values` says (they cost nothing or one pass over one byte per row): a mapping
with no rows, and a mapping to be scored by AUC whose labels are all of one class (AUC undefined).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from dlrm.data.format.errors import DataError, MappingTooSmall
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader import decode
from dlrm.data.reader.mapped_files import MappedFiles
from dlrm.data.reader.reader import rank_slice
from dlrm.errors import PeerRankFailed

# Gathers one small JSON-like object per rank and returns them in rank order, on every rank.
Gather = Callable[[object], list]


def check_mappings(spec: FeatureSpec, mappings: Sequence[str], scored: Sequence[str] = (), rank: int = 0,
                   world_size: int = 1, gather: Optional[Gather] = None, values: bool = True,
                   threads: int = 1) -> dict:
    """Refuse `mappings` (in order) if a mapping is empty, a value is bad (when `values`), or a `scored`
    mapping's labels are of one class. Every rank must call it (it runs one `gather` when
    `world_size` > 1) and gets the same error. Returns {mapping: {"rows", "positives"}}."""
    if world_size > 1 and gather is None:
        raise ValueError("checking on several ranks needs a gather collective")
    mappings = list(dict.fromkeys(mappings))
    files, local, failure = {}, None, None
    try:
        spec.validate(check_files=True, mappings=mappings)
        files = {mapping: MappedFiles(spec, mapping) for mapping in mappings}
        for mapping in mappings:
            _refuse_empty(files[mapping])
        local = [_check_share(files[m], rank, world_size, values, count_labels=m in scored, threads=threads)
                 for m in mappings]
    except (DataError, OSError) as error:  # e.g. node-local copies that differ: the others must hear of it
        failure = error if isinstance(error, DataError) else DataError(f"cannot read: {error}", error.filename)
    shares = gather([failure is not None, local]) if gather is not None and world_size > 1 \
        else [[failure is not None, local]]
    failed = [r for r, (did_fail, _) in enumerate(shares) if did_fail]
    if failed:
        if rank != failed[0] or failure is None:  # the lowest failing rank has its own failure
            raise PeerRankFailed(failed[0])
        failure.on_every_rank = len(failed) == world_size  # all saw it: rank 0 says it once; else this rank
        raise failure
    try:
        return _summarise(files, mappings, scored, [share for _, share in shares])
    except DataError as error:
        error.on_every_rank = True  # every rank sees every rank's findings and raises this same error
        raise


def _summarise(files: dict, mappings: list[str], scored: Sequence[str], shares: list) -> dict:
    """Raise the earliest bad value over all ranks' shares, then a scored mapping of one class."""
    summary = {}
    for i, mapping in enumerate(mappings):
        files[mapping].raise_for(decode.earliest([share[i][1] for share in shares]))  # shares do not overlap
        summary[mapping] = {"rows": files[mapping].num_rows, "positives": sum(share[i][0] for share in shares)}
    for mapping in mappings:
        if mapping in scored:
            _refuse_one_class(files[mapping], summary[mapping]["positives"])
    return summary


def _check_share(files: MappedFiles, rank: int, world_size: int, values: bool, count_labels: bool,
                 threads: int) -> tuple[int, tuple[int, int, int]]:
    """(positive labels, earliest bad (kind, column, row) or NO_ERROR) of this rank's rows."""
    begin, end = rank_slice(files.num_rows, rank, world_size)
    if values:
        return files.check_rows(begin, end, threads)
    positives = int(np.count_nonzero(files.sources.label[begin:end])) if count_labels else 0
    return positives, decode.NO_ERROR


def _refuse_empty(files: MappedFiles) -> None:
    if files.num_rows == 0:
        raise MappingTooSmall(f"mapping {files.mapping!r} has no rows (its files are empty)", files.label_chunk.path)


def _refuse_one_class(files: MappedFiles, positives: int) -> None:
    rows = files.num_rows
    if positives in (0, rows):
        raise DataError(f"all {rows:,} labels of mapping {files.mapping!r} are {1 if positives else 0}: the AUC is "
                        f"undefined with one class; evaluate on a mapping holding both (--test_mapping)",
                        files.label_chunk.path, files.label_chunk.features[0])
