"""The first reduce job: the quarantine file and the dictionaries, from the parse tasks' blobs.

One task per small partition of the shuffle (see parse_job.Partitions): the quarantine partition's task
writes quarantine.jsonl and returns the malformed summary; each feature's task sums that feature's
partial counts, numbers the kept values and writes the dictionary parquet part (to a staging directory
the driver publishes once the malformed-fraction check has passed) and the lookup arrays under _work.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from preproc_spark3.dictionary import build_feature, write_feature
from preproc_spark3.parse_job import QUARANTINE_PARTITION, Partitions
from preproc_spark3.quarantine import MalformedSummary, write_quarantine


@dataclass(frozen=True)
class DictionaryJob:
    raw_dir: str
    out_dir: str
    total_lines: int
    thresholds: tuple[int, ...]
    parquet_dir: str  # staging directory of the dictionary parquet parts
    lookup_dir: str  # the chunk writers' sorted (value, id) arrays

    def run(self, records: Iterator[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
        """One partition's records -> (partition, MalformedSummary) or (partition, cardinality)."""
        records = iter(records)
        first = next(records, None)
        if first is None:
            return
        partition = first[0]
        blobs = [first[1], *(blob for _, blob in records)]
        if partition == QUARANTINE_PARTITION:
            yield partition, write_quarantine(blobs, self.raw_dir, self.out_dir, self.total_lines)
            return
        feature = partition - Partitions.feature(0)
        dictionary = build_feature(blobs, self.thresholds[feature])
        write_feature(dictionary, feature, self.parquet_dir, self.lookup_dir)
        yield partition, dictionary.cardinality


def collect_results(results: list[tuple[int, Any]], features: int) -> tuple[MalformedSummary, list[int]]:
    """The job's results -> (malformed summary, cardinalities in feature order)."""
    by_partition = dict(results)
    return by_partition[QUARANTINE_PARTITION], [by_partition[Partitions.feature(i)] for i in range(features)]
