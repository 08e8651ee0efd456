"""The export's user error: one message, no traceback (`dlrm.cli_errors`)."""
from __future__ import annotations

from dlrm.errors import UserError


class ExportError(UserError):
    """A checkpoint that cannot be exported, an output directory in the way, a model too large for one host."""

    on_every_rank = True  # the trainer's hook checks the output directory on every rank alike
