"""Stopping a run on every rank together: on a signal, or when one rank cannot read its next batch.

Ranks run in lockstep through collectives, so a rank that stops on its own leaves the others blocked
in the next collective until Horovod's stall check kills them, and nothing is saved. Instead, before
each step every rank reads its next batch, then all ranks exchange one integer (`ProcessGroup.max_over_ranks`)
saying whether any of them wants to stop: a signal arrived, or reading raised an error. If one does,
every rank learns it at the same step boundary; the trainer writes a checkpoint of the last good state
and raises `StopAgreed.final_error()`: the failing rank its own error, the others `PeerRankFailed`, and
on a signal every rank `Interrupted` (exit status 128 + the signal number).

`StopRequests` turns SIGTERM, SIGUSR1 (Slurm's pre-emption / time-limit warnings) and SIGINT (Ctrl-C)
into such a request for the duration of a run, and restores the previous handlers afterwards. A second
Ctrl-C exits at once, without a checkpoint.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Iterable, Iterator, Optional

from dlrm.dist import ProcessGroup
from dlrm.errors import Interrupted, PeerRankFailed

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
# The agreed integer: 0 = go on; 1..ERROR_CODE-1 = a signal number; ERROR_CODE + (world_size - rank) = an
# error on `rank` (the max over ranks names the lowest failing rank, and an error outranks a signal).
ERROR_CODE = 1000
EXIT_AT_ONCE_MESSAGE = b"second Ctrl-C: exiting now, without a checkpoint\n"


def signal_name(signal_number: int) -> str:
    try:
        return signal.Signals(signal_number).name
    except ValueError:
        return f"signal {signal_number}"


class StopAgreed(Exception):
    """Every rank agreed to stop at this step boundary (caught by the trainer, never shown to users)."""

    def __init__(self, signal_number: Optional[int], failed_rank: Optional[int], own_error: Optional[BaseException],
                 world_size: int = 1):
        super().__init__(f"stop agreed (signal {signal_number}, failed rank {failed_rank})")
        self.signal_number = signal_number
        self.failed_rank = failed_rank
        self.own_error = own_error
        self.world_size = world_size

    def reason(self) -> str:
        if self.failed_rank is None:
            return f"received {signal_name(self.signal_number or 0)}"
        return f"rank {self.failed_rank} could not read its data" if self.world_size > 1 else "could not read the data"

    def final_error(self, where: str = "", checkpoint_note: str = "") -> BaseException:
        """What this rank raises once the checkpoint (if any) is written: its own error, PeerRankFailed or
        Interrupted. `where` ("after step 12") and `checkpoint_note` go into the messages built here."""
        if self.own_error is not None:
            return self.own_error
        if self.failed_rank is None:
            stopped = " ".join(filter(None, [f"stopped by {signal_name(self.signal_number or 0)}", where]))
            return Interrupted(self.signal_number or 0, "; ".join(filter(None, [stopped, checkpoint_note])))
        stopped = " ".join(filter(None, ["stopped", where, f"because rank {self.failed_rank} failed"]))
        return PeerRankFailed(self.failed_rank, "; ".join(filter(None, [f"{stopped} (its message is above)",
                                                                        checkpoint_note])))


def _agree(group: ProcessGroup, error: Optional[BaseException], signal_number: Optional[int]) -> None:
    """One scalar collective: raise StopAgreed on every rank if any rank has an error or a signal."""
    own = ERROR_CODE + group.size - group.rank if error is not None else (signal_number or 0)
    agreed = group.max_over_ranks(own, name="stop_agreement")
    if agreed >= ERROR_CODE:
        raise StopAgreed(None, group.size - (agreed - ERROR_CODE), error, group.size)
    if agreed:
        raise StopAgreed(agreed, None, None, group.size)


def next_together(items: Iterator, group: ProcessGroup, signal_number: Optional[int] = None):
    """`next(items)` once every rank has its next item and no signal arrived; else StopAgreed on all ranks.

    StopIteration passes through without a collective: every rank holds the same number of batches.
    """
    try:
        item, error = next(items), None
    except StopIteration:
        raise
    except Exception as read_error:  # noqa: BLE001 - any failure to read must reach the other ranks
        item, error = None, read_error
    _agree(group, error, signal_number)
    return item


def read_together(batches: Iterable, group: ProcessGroup,
                  pending_signal: Callable[[], Optional[int]] = lambda: None) -> Iterator:
    """Iterate `batches` in step with the other ranks (evaluation): when one rank cannot read its next
    batch, or `pending_signal()` reports a stop signal, every rank raises StopAgreed at the same batch
    instead of some blocking in a collective."""
    iterator = iter(batches)
    try:
        while True:
            try:
                item = next_together(iterator, group, pending_signal())
            except StopIteration:
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close:
            close()


class StopRequests:
    """Signal handlers for one run (a context manager) and the per-step agreement.

    With `announce` (the primary rank), the first signal prints one line to stderr at once (with
    `os.write`: a handler may run in the middle of another write to sys.stderr). Handlers are installed
    only from the main thread (Python's rule); elsewhere signals keep their previous behaviour and only
    data errors are agreed on.
    """

    def __init__(self, group: ProcessGroup, announce: bool = True):
        self.group = group
        self.announce = announce
        self.signal_number: Optional[int] = None
        self._previous: dict = {}

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def _on_signal(self, signal_number: int, frame) -> None:
        if self.signal_number == signal.SIGINT and signal_number == signal.SIGINT:
            os.write(2, EXIT_AT_ONCE_MESSAGE)
            os._exit(128 + signal.SIGINT)
        if self.signal_number is None:
            self.signal_number = signal_number
            if self.announce:
                again = " (Ctrl-C again exits at once, without one)" if signal_number == signal.SIGINT else ""
                os.write(2, f"received {signal_name(signal_number)}: stopping after the current step and "
                            f"writing a checkpoint{again}\n".encode())

    def next_batch(self, batches: Iterator):
        """The next training batch once all ranks agreed to go on; StopAgreed on every rank otherwise."""
        return next_together(batches, self.group, self.signal_number)

    def check(self) -> None:
        """Agree on signals only (after the last step): StopAgreed on every rank if any rank got one."""
        _agree(self.group, None, self.signal_number)
