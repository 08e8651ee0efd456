"""One rank of the two-rank launches of tests/data/test_data_check.py: check each mapping through the real
collective and report what each rank raised and printed.

    python -m tests.workers.data_check DATASET [DATASET_OF_RANK_1]
"""
import sys
from typing import Optional

from dlrm import dist
from dlrm.cli_errors import user_error_text
from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.validate import check_mappings
from dlrm.errors import UserError
from tests.support.multirank import write_rank_result


def main(dataset: str, dataset_of_rank_1: Optional[str] = None) -> None:
    """One rank of the two-rank tests: check each mapping through the real collective, report the errors
    (rank 1 reads `dataset_of_rank_1` when given, as a node-local copy)."""
    group = dist.start()
    mine = dataset_of_rank_1 if dataset_of_rank_1 and group.rank == 1 else dataset
    found, messages, outcomes, printed = {}, [], [], []
    for mapping in ("train", "test"):
        try:
            check_mappings(FeatureSpec.load(mine), [mapping], [mapping], rank=group.rank, world_size=group.size,
                           gather=group.allgather_object, threads=dist.cores_per_rank())
            outcomes.append("ok")
        except UserError as error:
            outcomes.append(type(error).__name__)
            printed.append(user_error_text(error, group.rank, group.size))
            if isinstance(error, DataError):
                found[mapping] = [error.file, error.feature, error.row]
                messages.append(str(error).replace(mine, dataset))
    write_rank_result(group.rank, dict(found, messages=messages, outcomes=outcomes, printed=printed))


if __name__ == "__main__":
    main(*sys.argv[1:3])
