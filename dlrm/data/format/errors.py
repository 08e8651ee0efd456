"""The one exception the data layer raises for bad input, with the place it was found.

Every error names the file, the feature and (where it applies) the row, so a user can go
straight to the bad record instead of guessing which of 40 files is wrong.
"""
from __future__ import annotations

from typing import Optional

from dlrm.errors import UserError


class DataError(UserError, ValueError):
    """Bad dataset input. `file`, `feature` and `row` say where (None when not applicable)."""

    def __init__(self, message: str, file: Optional[str] = None, feature: Optional[str] = None,
                 row: Optional[int] = None):
        self.message = message  # without the place, for callers that re-state where (transcode)
        self.file = file
        self.feature = feature
        self.row = row
        where = []
        if file is not None:
            where.append(f"file {file}")
        if feature is not None:
            where.append(f"feature {feature!r}")
        if row is not None:
            where.append(f"row {row}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class SpecError(DataError):
    """A feature spec that is inconsistent with itself or with the files on disk.

    `problems` lists every problem found (validation reports all of them at once).
    """

    on_every_rank = True  # every rank loads the same spec: rank 0 reports

    def __init__(self, problems: list[str], path: Optional[str] = None):
        self.problems = list(problems)
        body = "\n  - ".join(self.problems)
        # The path leads the text itself ("invalid feature spec <path>"), so it is not passed as `file`
        # (that would prefix "file <path>: " a second time); it is still kept as `.file`.
        DataError.__init__(self, f"invalid feature spec{' ' + path if path else ''} "
                                 f"({len(self.problems)} problem(s)):\n  - {body}")
        self.file = path


class MappingTooSmall(DataError):
    """A mapping with fewer rows than the run needs (none, or less than one global batch to drop down to)."""

    on_every_rank = True  # every rank sees the same row counts: rank 0 reports
