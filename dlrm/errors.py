"""The errors a user can cause, and how the command-line entry points report them.

`UserError` is the base of every error caused by input, configuration or the environment (bad data,
a bad flag, an unusable checkpoint or path, a model that does not fit): the entry points print its
message once, without a traceback (`--debug` shows it). Anything else is a bug and keeps its
traceback.
"""
from __future__ import annotations


class UserError(Exception):
    """An error the user can fix; its message says what is wrong and where.

    `on_every_rank`: True when every rank raises the same error from the same input (flags, config,
    feature spec, plan, checkpoint compatibility): rank 0 alone reports it. False when one rank saw
    it (a bad row in its share of the data): that rank reports it, naming itself.
    """

    on_every_rank = False
    exit_code = 1  # the process's exit status when this error ends it


class UsageError(UserError):
    """A bad command line (argparse's message with the usage line); exit status 2 as argparse's."""

    on_every_rank = True
    exit_code = 2


class PeerRankFailed(UserError):
    """This rank stopped because another rank reported an error; that rank prints the message."""

    on_every_rank = True  # printed by no rank: the failed rank says what happened (rank 0's log names it)

    def __init__(self, failed_rank: int, message: str = ""):
        self.failed_rank = failed_rank
        super().__init__(message or f"stopped because rank {failed_rank} failed (its message is above)")


class Interrupted(UserError):
    """The run stopped on a signal (SIGTERM, SIGUSR1, SIGINT) after writing what it had to.

    The process exits with `exit_code` (128 + the signal number, as a shell reports a signal).
    """

    on_every_rank = True  # every rank stops on the signal: rank 0 reports

    def __init__(self, signal_number: int, message: str):
        self.signal_number = signal_number
        self.exit_code = 128 + signal_number
        super().__init__(message)


class EnvironmentProblem(UserError):
    """The machine or the launcher is set up in a way this run cannot work with (an MPI plugin that does
    not match, a missing thread library); the message says what to change. Every rank sees it alike."""

    on_every_rank = True


class PathError(UserError):
    """A directory or file given on the command line that the run cannot create, read or write."""
